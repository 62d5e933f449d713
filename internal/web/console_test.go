package web

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/auth"
	"github.com/paddockhq/paddock/internal/store"
)

// signIn signs c in as name with password over JSON and returns the CSRF token.
func (c *client) signIn(name, password string) string {
	c.t.Helper()
	c.want(c.json("/auth/login", api.Credentials{Username: name, Password: password}), http.StatusOK)
	return c.csrf()
}

// Changing the password keeps this session, ends every other one, revokes the
// user's API tokens, and the new password signs in while the old one does not.
func TestChangePasswordEndsOtherSessions(t *testing.T) {
	e := newEnv(t, false)
	here := e.client(t)
	here.register("alice")
	csrf := here.csrf()
	other := e.client(t)
	other.signIn("alice", goodPassword)
	tok, _, err := e.auth.LoginToken(t.Context(), auth.LoginRequest{Username: "alice", Password: goodPassword}, "cli")
	if err != nil {
		t.Fatal(err)
	}

	const next = "an entirely new passphrase"
	here.want(here.json("/auth/password", api.ChangePasswordRequest{CurrentPassword: goodPassword, NewPassword: next}, "X-CSRF-Token", csrf), http.StatusNoContent)

	here.want(here.get("/auth/session"), http.StatusOK)
	other.apiError(other.get("/auth/session"), http.StatusUnauthorized, api.CodeUnauthenticated)
	bearer := here.get("/auth/session", "Authorization", "Bearer "+tok.Reveal())
	here.apiError(bearer, http.StatusUnauthorized, api.CodeUnauthenticated)

	fresh := e.client(t)
	fresh.apiError(fresh.json("/auth/login", api.Credentials{Username: "alice", Password: goodPassword}), http.StatusUnauthorized, api.CodeUnauthenticated)
	fresh.signIn("alice", next)

	// The change is audited without either password.
	evs, err := e.st.ListAudit(t.Context(), storeFilter("auth.password.change"))
	if err != nil || len(evs) != 1 {
		t.Fatalf("auth.password.change events: %v, %v", evs, err)
	}
	if d := evs[0].Detail; d["sessions_revoked"] != float64(1) {
		t.Errorf("event detail %v: want sessions_revoked 1", d)
	}
	for _, pw := range []string{goodPassword, next} {
		if strings.Contains(auditDump(t, e), pw) {
			t.Errorf("a password is in the audit log")
		}
	}
}

// A wrong current password is a 403 naming current_password, and nothing changes:
// the other session lives on and the old password still signs in.
func TestChangePasswordWrongCurrent(t *testing.T) {
	e := newEnv(t, false)
	here := e.client(t)
	here.register("bob")
	csrf := here.csrf()
	other := e.client(t)
	other.signIn("bob", goodPassword)

	r := here.json("/auth/password", api.ChangePasswordRequest{CurrentPassword: "not my password at all", NewPassword: "an entirely new passphrase"}, "X-CSRF-Token", csrf)
	got := here.apiError(r, http.StatusForbidden, api.CodePermissionDenied)
	if !strings.Contains(got.Message, "current_password") || !strings.Contains(got.Message, "not your current password") {
		t.Errorf("message %q does not name the current password", got.Message)
	}
	if strings.Contains(r.body, "not my password at all") {
		t.Error("the answer echoes the password typed")
	}
	other.want(other.get("/auth/session"), http.StatusOK)
	here.want(here.get("/auth/session"), http.StatusOK)
	e.client(t).signIn("bob", goodPassword)

	// Empty is named too, before any password is checked.
	got = here.apiError(here.json("/auth/password", api.ChangePasswordRequest{NewPassword: "an entirely new passphrase"}, "X-CSRF-Token", csrf), http.StatusBadRequest, api.CodeInvalidArgument)
	if !strings.Contains(got.Message, "current_password") {
		t.Errorf("message %q does not name current_password", got.Message)
	}
}

// A new password that breaks the registration policy is refused naming the rule, and
// the old one still works.
func TestChangePasswordWeakRefused(t *testing.T) {
	e := newEnv(t, false)
	c := e.client(t)
	c.register("carol")
	csrf := c.csrf()
	for _, tc := range []struct{ pw, want string }{
		{"short", "too short"},
		{"password1234", "common"},
		{"carol", "too short"},
		{"abcdefghijklmnop", "sequence"},
	} {
		got := c.apiError(c.json("/auth/password", api.ChangePasswordRequest{CurrentPassword: goodPassword, NewPassword: tc.pw}, "X-CSRF-Token", csrf), http.StatusBadRequest, api.CodeInvalidArgument)
		if !strings.Contains(got.Message, "new_password") || !strings.Contains(got.Message, tc.want) {
			t.Errorf("new password %q: message %q, want it to name new_password and %q", tc.pw, got.Message, tc.want)
		}
	}
	e.client(t).signIn("carol", goodPassword)
}

// The password endpoints need the session's CSRF token, a session (not an API token)
// and JSON.
func TestChangePasswordGuards(t *testing.T) {
	e := newEnv(t, false)
	c := e.client(t)
	c.register("dave")
	body := api.ChangePasswordRequest{CurrentPassword: goodPassword, NewPassword: "an entirely new passphrase"}
	c.apiError(c.json("/auth/password", body), http.StatusForbidden, api.CodePermissionDenied)
	tok, _, err := e.auth.LoginToken(t.Context(), auth.LoginRequest{Username: "dave", Password: goodPassword}, "cli")
	if err != nil {
		t.Fatal(err)
	}
	bare := e.client(t)
	got := bare.apiError(bare.json("/auth/password", body, "Authorization", "Bearer "+tok.Reveal()), http.StatusForbidden, api.CodePermissionDenied)
	if !strings.Contains(got.Message, "browser session") {
		t.Errorf("token caller: %q", got.Message)
	}
	c.apiError(c.form("/auth/password", nil, "X-CSRF-Token", c.csrf()), http.StatusUnsupportedMediaType, "")
	e.client(t).signIn("dave", goodPassword)
}

// New recovery codes need the current password; the old codes stop working and a new
// one recovers the account.
func TestRenewRecoveryCodes(t *testing.T) {
	e := newEnv(t, false)
	c := e.client(t)
	reg := c.register("erin")
	csrf := c.csrf()
	got := c.apiError(c.json("/auth/recovery-codes", api.RenewRecoveryCodesRequest{CurrentPassword: "wrong wrong wrong"}, "X-CSRF-Token", csrf), http.StatusForbidden, api.CodePermissionDenied)
	if !strings.Contains(got.Message, "current_password") {
		t.Errorf("message %q", got.Message)
	}
	var out api.RecoveryCodes
	c.want(c.json("/auth/recovery-codes", api.RenewRecoveryCodesRequest{CurrentPassword: goodPassword}, "X-CSRF-Token", csrf), http.StatusCreated).decode(&out)
	if len(out.RecoveryCodes) != len(reg.RecoveryCodes) {
		t.Fatalf("%d codes, want %d", len(out.RecoveryCodes), len(reg.RecoveryCodes))
	}
	x := e.client(t)
	x.apiError(x.json("/auth/recovery", api.RecoverRequest{Username: "erin", RecoveryCode: reg.RecoveryCodes[0], NewPassword: "an entirely new passphrase"}), http.StatusUnauthorized, "")
	x.want(x.json("/auth/recovery", api.RecoverRequest{Username: "erin", RecoveryCode: out.RecoveryCodes[0], NewPassword: "an entirely new passphrase"}), http.StatusNoContent)
	for _, code := range out.RecoveryCodes {
		if strings.Contains(auditDump(t, e), code) {
			t.Error("a recovery code is in the audit log")
		}
	}
}

// GET /console: signed out, sign in first; signed in, the page with the session's
// CSRF token and no admin section for a plain user; unknown /console paths are 404.
func TestConsolePage(t *testing.T) {
	e := newEnv(t, false)
	c := e.client(t)
	r := c.want(c.get("/console"), http.StatusSeeOther)
	if loc := r.Header.Get("Location"); loc != "/login" {
		t.Errorf("signed out: Location %q", loc)
	}
	c.register("frank")
	r = c.want(c.get("/console"), http.StatusOK)
	// The page's token is the session's: it works for a state-changing request.
	_, rest, _ := strings.Cut(r.body, `<meta name="csrf-token" content="`)
	pageToken, _, _ := strings.Cut(rest, `"`)
	c.want(c.json("/auth/role", api.RoleRequest{Role: api.RoleDev}, "X-CSRF-Token", pageToken), http.StatusNoContent)
	if strings.Contains(r.body, `id="admin"`) {
		t.Error("a plain user sees the admin section")
	}
	if csp := r.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("CSP %q", csp)
	}
	c.apiError(c.get("/console/nothing"), http.StatusNotFound, api.CodeNotFound)
	// This env serves no desktops.
	c.apiError(c.get("/console/desktop/sb-aaaaaaaaaa"), http.StatusNotFound, api.CodeNotFound)
	for _, a := range []string{"/auth/assets/console.js", "/auth/assets/console.css"} {
		c.want(c.get(a), http.StatusOK)
	}
}

func storeFilter(action string) store.AuditFilter {
	return store.AuditFilter{Action: action, Limit: 1000}
}

// auditDump is every audit event, as JSON, to search for leaked secrets.
func auditDump(t *testing.T, e *env) string {
	t.Helper()
	evs, err := e.st.ListAudit(t.Context(), store.AuditFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(evs)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
