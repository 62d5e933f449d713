package web

import (
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/auth"
)

var securityHeaderWant = map[string]string{
	"Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
	"X-Frame-Options":         "DENY",
	"Referrer-Policy":         "same-origin",
	"X-Content-Type-Options":  "nosniff",
	"Cache-Control":           "no-store",
}

func checkSecurityHeaders(t *testing.T, r *resp) {
	t.Helper()
	for k, v := range securityHeaderWant {
		if got := r.Header.Get(k); got != v {
			t.Errorf("%s %s: %s = %q, want %q", r.Request.Method, r.Request.URL.Path, k, got, v)
		}
	}
}

func TestPages(t *testing.T) {
	e := newEnv(t, false)
	c := e.client(t)
	pages := map[string][]string{
		"/login":    {`action="/auth/login"`, `autocomplete="username"`, `autocomplete="current-password"`, `href="/register"`, `href="/recovery"`},
		"/register": {`action="/auth/register"`, `autocomplete="username"`, `autocomplete="new-password"`, `href="/login"`, `href="/recovery"`},
		"/recovery": {`action="/auth/recovery"`, `name="recovery_code"`, `autocomplete="new-password"`, `href="/login"`, `href="/register"`},
	}
	labelFor := regexp.MustCompile(`<label for="([a-z_]+)">`)
	for path, wants := range pages {
		t.Run(path, func(t *testing.T) {
			r := c.want(c.get(path), http.StatusOK)
			checkSecurityHeaders(t, r)
			if ct := r.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
				t.Errorf("Content-Type %q", ct)
			}
			for _, w := range append(wants, `href="/auth/assets/style.css"`) {
				if !strings.Contains(r.body, w) {
					t.Errorf("page lacks %s", w)
				}
			}
			// Every input that is not hidden has a label.
			for _, m := range regexp.MustCompile(`<input id="([a-z_]+)"`).FindAllStringSubmatch(r.body, -1) {
				if !slices.ContainsFunc(labelFor.FindAllStringSubmatch(r.body, -1), func(l []string) bool { return l[1] == m[1] }) {
					t.Errorf("input %s has no label", m[1])
				}
			}
			for _, bad := range []string{"<script", "style=", "onclick", "onsubmit", "http://", "https://"} {
				if strings.Contains(r.body, bad) {
					t.Errorf("page contains %q", bad)
				}
			}
			c.want(c.do(http.MethodHead, path, "", ""), http.StatusOK)
		})
	}
	css := c.want(c.get("/auth/assets/style.css"), http.StatusOK)
	if !strings.HasPrefix(css.Header.Get("Content-Type"), "text/css") || !strings.Contains(css.body, ".card") {
		t.Errorf("stylesheet: %s %.80q", css.Header.Get("Content-Type"), css.body)
	}
	c.apiError(c.get("/auth/assets/"), http.StatusNotFound, api.CodeNotFound)
	c.want(c.get("/auth/assets/nope.css"), http.StatusNotFound)
	c.apiError(c.get("/auth/nope"), http.StatusNotFound, api.CodeNotFound)
	if r := c.get(testHome); r.body != homeBody {
		t.Errorf("Home: %q", r.body)
	}
}

func TestMethodNotAllowed(t *testing.T) {
	e := newEnv(t, false)
	c := e.client(t)
	for _, tc := range []struct{ method, path, allow string }{
		{"POST", "/login", "GET, HEAD"},
		{"DELETE", "/register", "GET, HEAD"},
		{"PUT", "/recovery", "GET, HEAD"},
		{"POST", "/auth/assets/style.css", "GET, HEAD"},
		{"GET", "/auth/login", "POST"},
		{"GET", "/auth/register", "POST"},
		{"GET", "/auth/recovery", "POST"},
		{"GET", "/auth/logout", "POST"},
		{"GET", "/auth/token", "POST"},
		{"PUT", "/auth/role", "POST"},
		{"POST", "/auth/session", "GET, HEAD"},
	} {
		r := c.do(tc.method, tc.path, "", "")
		c.apiError(r, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed)
		if got := r.Header.Get("Allow"); got != tc.allow {
			t.Errorf("%s %s: Allow %q, want %q", tc.method, tc.path, got, tc.allow)
		}
		checkSecurityHeaders(t, r)
	}
}

func TestRegisterJSON(t *testing.T) {
	e := newEnv(t, false)
	c := e.client(t)
	reg := c.register("alice")
	if reg.User.Username != "alice" || reg.User.Role != "user" || reg.User.ID == "" {
		t.Errorf("user %+v", reg.User)
	}
	if len(reg.RecoveryCodes) != auth.RecoveryCodeCount || len(slices.Compact(slices.Sorted(slices.Values(reg.RecoveryCodes)))) != auth.RecoveryCodeCount {
		t.Errorf("recovery codes %v", reg.RecoveryCodes)
	}
	var s api.Session
	c.want(c.get("/auth/session"), http.StatusOK).decode(&s)
	if !reflect.DeepEqual(s.User, reg.User) || s.Role != api.RoleLive || s.CSRFToken == "" {
		t.Errorf("session after registration %+v", s)
	}

	for _, tc := range []struct {
		name   string
		body   any
		status int
		code   string
		msg    string
	}{
		{"taken", api.Credentials{Username: "ALICE", Password: goodPassword}, 409, api.CodeAlreadyExists, "taken"},
		{"bad username", api.Credentials{Username: "a", Password: goodPassword}, 400, api.CodeInvalidArgument, "username must be 3 to 32"},
		{"short password", api.Credentials{Username: "bob", Password: "short"}, 400, api.CodeInvalidArgument, "too short"},
		{"no admin", map[string]string{"username": "mallory", "password": goodPassword, "role": "admin"}, 400, api.CodeInvalidArgument, "unknown field \"role\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eb := c.apiError(e.client(t).json("/auth/register", tc.body), tc.status, tc.code)
			if !strings.Contains(eb.Message, tc.msg) {
				t.Errorf("message %q lacks %q", eb.Message, tc.msg)
			}
		})
	}
	if _, err := e.st.UserByUsername(t.Context(), "mallory"); err == nil {
		t.Error("mallory was created")
	}
}

func TestRegisterForm(t *testing.T) {
	e := newEnv(t, false)
	c := e.client(t)
	r := c.want(c.form("/auth/register", url.Values{"username": {"alice"}, "password": {goodPassword}}), http.StatusOK)
	checkSecurityHeaders(t, r)
	codes := regexp.MustCompile(`<code>([0-9a-z-]+)</code>`).FindAllStringSubmatch(r.body, -1)
	if len(codes) != auth.RecoveryCodeCount {
		t.Fatalf("%d codes on the page:\n%s", len(codes), r.body)
	}
	for _, w := range []string{"Save these recovery codes now", "only time they are shown", `href="` + testHome + `"`, "Continue to your app"} {
		if !strings.Contains(r.body, w) {
			t.Errorf("codes page lacks %q", w)
		}
	}
	if c.cookie(auth.InsecureCookieName) == "" {
		t.Error("no session cookie after registration")
	}
	if c.get(testHome).body != homeBody {
		t.Error("Continue does not reach Home")
	}
	// A code from the page works.
	c2 := e.client(t)
	c2.want(c2.json("/auth/recovery", api.RecoverRequest{Username: "alice", RecoveryCode: codes[3][1], NewPassword: "a brand new passphrase"}), http.StatusNoContent)

	for _, tc := range []struct {
		name   string
		form   url.Values
		status int
		msg    string
	}{
		{"short password", url.Values{"username": {"bob"}, "password": {"tiny secret"}}, 400, "Password is too short"},
		{"taken", url.Values{"username": {"Alice"}, "password": {"another long passphrase"}}, 409, "Username &#34;Alice&#34; is taken"},
		{"no admin", url.Values{"username": {"bob"}, "password": {"another long passphrase"}, "role": {"admin"}}, 400, "Request body: unknown field &#34;role&#34;"},
		{"twice", url.Values{"username": {"bob", "carol"}, "password": {"another long passphrase"}}, 400, "given 2 times"},
		{"escaped", url.Values{"username": {"<b>x</b>"}, "password": {"another long passphrase"}}, 400, "only letters, digits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.client(t).form("/auth/register", tc.form)
			if r.StatusCode != tc.status || !strings.Contains(r.body, tc.msg) || !strings.Contains(r.body, `role="alert"`) {
				t.Fatalf("status %d, want %d with %q:\n%s", r.StatusCode, tc.status, tc.msg, r.body)
			}
			if strings.Contains(r.body, tc.form.Get("password")) {
				t.Error("the page echoes the password")
			}
			if strings.Contains(r.body, "<b>x</b>") {
				t.Error("the username is not escaped")
			}
			if tc.name == "short password" && !strings.Contains(r.body, `value="bob"`) {
				t.Error("the username typed is not kept")
			}
		})
	}
}

func TestLogin(t *testing.T) {
	e := newEnv(t, false)
	e.client(t).register("alice")

	t.Run("json", func(t *testing.T) {
		c := e.client(t)
		var s api.Session
		c.want(c.json("/auth/login", api.Credentials{Username: "alice", Password: goodPassword}), http.StatusOK).decode(&s)
		if s.User.Username != "alice" || s.CSRFToken == "" || s.Role != api.RoleLive {
			t.Errorf("session %+v", s)
		}
		c.want(c.get("/auth/session"), http.StatusOK)
		eb := c.apiError(e.client(t).json("/auth/login", api.Credentials{Username: "alice", Password: "not the password"}), 401, api.CodeUnauthenticated)
		if !strings.Contains(eb.Message, "invalid username or password") {
			t.Errorf("message %q", eb.Message)
		}
		c.apiError(e.client(t).json("/auth/login", api.Credentials{Username: "nobody", Password: goodPassword}), 401, api.CodeUnauthenticated)
	})
	t.Run("form", func(t *testing.T) {
		c := e.client(t)
		r := c.want(c.form("/auth/login", url.Values{"username": {"alice"}, "password": {goodPassword}}), http.StatusSeeOther)
		if loc := r.Header.Get("Location"); loc != testHome {
			t.Errorf("Location %q", loc)
		}
		c.want(c.get("/auth/session"), http.StatusOK)
		// Signed in, /login offers the way on, the role switch and sign-out.
		page := c.want(c.get("/login"), http.StatusOK).body
		for _, w := range []string{"signed in as <strong>alice</strong>", `action="/auth/logout"`, `action="/auth/role"`, `name="csrf_token"`} {
			if !strings.Contains(page, w) {
				t.Errorf("signed-in /login lacks %q", w)
			}
		}
		r = e.client(t).form("/auth/login", url.Values{"username": {"alice"}, "password": {"not the password"}})
		if r.StatusCode != 401 || !strings.Contains(r.body, "Invalid username or password.") || !strings.Contains(r.body, `value="alice"`) || strings.Contains(r.body, "not the password") {
			t.Errorf("bad password: %d\n%s", r.StatusCode, r.body)
		}
	})
	t.Run("rate limited", func(t *testing.T) {
		c := e.client(t)
		for range 4 { // 1 failure since the last success above: 5 in all
			c.want(c.form("/auth/login", url.Values{"username": {"alice"}, "password": {"not the password"}}), 401)
		}
		r := c.form("/auth/login", url.Values{"username": {"alice"}, "password": {goodPassword}})
		if r.StatusCode != http.StatusTooManyRequests || !strings.Contains(r.body, "Too many failed sign-in attempts") {
			t.Fatalf("6th attempt: %d\n%s", r.StatusCode, r.body)
		}
		if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 || s > 15*60+1 { // the pair backs off from a second
			t.Errorf("Retry-After %q", r.Header.Get("Retry-After"))
		}
		r = c.json("/auth/login", api.Credentials{Username: "alice", Password: goodPassword})
		c.apiError(r, http.StatusTooManyRequests, api.CodeLimitExceeded)
		if r.Header.Get("Retry-After") == "" {
			t.Error("JSON 429 without Retry-After")
		}
	})
}

// Unauthenticated posts from another origin are refused: a foreign page must not
// sign the victim in to the attacker's account (login CSRF).
func TestLoginCSRF(t *testing.T) {
	e := newEnv(t, false)
	e.client(t).register("alice")
	login := url.Values{"username": {"alice"}, "password": {goodPassword}}
	for _, tc := range []struct {
		name   string
		hdr    []string
		status int
	}{
		{"foreign origin", []string{"Origin", "https://evil.example"}, 403},
		{"cross-site", []string{"Sec-Fetch-Site", "cross-site"}, 403},
		{"same-origin", []string{"Sec-Fetch-Site", "same-origin"}, 303},
		{"own origin", []string{"Origin", e.srv.URL}, 303},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := e.client(t)
			r := c.want(c.form("/auth/login", login, tc.hdr...), tc.status)
			if tc.status == 403 {
				if c.cookie(auth.InsecureCookieName) != "" || !strings.Contains(r.body, "CSRF") {
					t.Errorf("refused login set a cookie or says nothing useful:\n%s", r.body)
				}
				for _, path := range []string{"/auth/register", "/auth/recovery"} {
					c.want(c.form(path, url.Values{"username": {"bob"}}, tc.hdr...), 403)
				}
				c.apiError(c.json("/auth/token", api.TokenRequest{Username: "alice", Password: goodPassword, Name: "x"}, tc.hdr...), 403, api.CodePermissionDenied)
			}
		})
	}
	// text/plain is how a cross-site form would post JSON-looking bytes.
	c := e.client(t)
	c.apiError(c.do("POST", "/auth/login", "text/plain", `{"username":"alice","password":"`+goodPassword+`"}`), 415, api.CodeUnsupportedMedia)
}

func TestRecovery(t *testing.T) {
	e := newEnv(t, false)
	owner := e.client(t)
	reg := owner.register("alice")
	oldSession := owner.cookie(auth.InsecureCookieName)

	c := e.client(t)
	c.want(c.json("/auth/recovery", api.RecoverRequest{Username: "alice", RecoveryCode: reg.RecoveryCodes[0], NewPassword: "new password one"}), http.StatusNoContent)
	// Every session of the user ended.
	owner.apiError(owner.get("/auth/session"), 401, api.CodeUnauthenticated)
	c2 := e.client(t)
	c2.apiError(c2.get("/auth/session", "Cookie", auth.InsecureCookieName+"="+oldSession), 401, api.CodeUnauthenticated)
	// The new password works, the old does not.
	c.want(c.json("/auth/login", api.Credentials{Username: "alice", Password: "new password one"}), http.StatusOK)
	c.apiError(e.client(t).json("/auth/login", api.Credentials{Username: "alice", Password: goodPassword}), 401, "")
	// A used code is refused, however it is typed.
	replay := strings.ToUpper(strings.ReplaceAll(reg.RecoveryCodes[0], "-", " "))
	eb := c.apiError(c.json("/auth/recovery", api.RecoverRequest{Username: "alice", RecoveryCode: replay, NewPassword: "new password two"}), 401, api.CodeUnauthenticated)
	if !strings.Contains(eb.Message, "invalid username or password") {
		t.Errorf("replay: %q", eb.Message)
	}
	c.apiError(c.json("/auth/recovery", api.RecoverRequest{Username: "alice", RecoveryCode: reg.RecoveryCodes[1], NewPassword: "short"}), 400, api.CodeInvalidArgument)

	// Form: signed in with the new password, sent Home.
	f := e.client(t)
	r := f.want(f.form("/auth/recovery", url.Values{"username": {"alice"}, "recovery_code": {reg.RecoveryCodes[1]}, "new_password": {"new password three"}}), http.StatusSeeOther)
	if r.Header.Get("Location") != testHome {
		t.Errorf("Location %q", r.Header.Get("Location"))
	}
	f.want(f.get("/auth/session"), http.StatusOK)
	r = e.client(t).form("/auth/recovery", url.Values{"username": {"alice"}, "recovery_code": {reg.RecoveryCodes[1]}, "new_password": {"new password four"}})
	if r.StatusCode != 401 || !strings.Contains(r.body, "Invalid username or password.") || !strings.Contains(r.body, `value="alice"`) || strings.Contains(r.body, reg.RecoveryCodes[1]) {
		t.Errorf("replayed code on the form: %d\n%s", r.StatusCode, r.body)
	}
}

func TestLogout(t *testing.T) {
	e := newEnv(t, false)
	c := e.client(t)
	c.register("alice")
	sid := c.cookie(auth.InsecureCookieName)

	// No CSRF token, or another session's: refused, and the session lives on.
	c.apiError(c.do("POST", "/auth/logout", "application/json", ""), 403, api.CodePermissionDenied)
	other := e.client(t)
	other.want(other.json("/auth/login", api.Credentials{Username: "alice", Password: goodPassword}), 200)
	c.apiError(c.do("POST", "/auth/logout", "application/json", "", auth.CSRFHeader, other.csrf()), 403, api.CodePermissionDenied)
	r := c.form("/auth/logout", url.Values{})
	if r.StatusCode != 403 || !strings.Contains(r.body, "CSRF") {
		t.Errorf("form logout without token: %d\n%s", r.StatusCode, r.body)
	}
	c.want(c.get("/auth/session"), 200)

	c.want(c.do("POST", "/auth/logout", "application/json", "", auth.CSRFHeader, c.csrf()), http.StatusNoContent)
	if c.cookie(auth.InsecureCookieName) != "" {
		t.Error("session cookie not cleared")
	}
	// The revoked session is refused even by a client that kept the cookie.
	c.apiError(c.get("/auth/session", "Cookie", auth.InsecureCookieName+"="+sid), 401, api.CodeUnauthenticated)
	c.apiError(c.do("POST", "/auth/logout", "application/json", ""), 401, api.CodeUnauthenticated)

	// Form logout: with the page's token, then again with none (already out): /login.
	tok := other.csrf()
	r = other.want(other.form("/auth/logout", url.Values{auth.CSRFFormField: {tok}}), http.StatusSeeOther)
	if r.Header.Get("Location") != "/login" {
		t.Errorf("Location %q", r.Header.Get("Location"))
	}
	other.want(other.form("/auth/logout", url.Values{}), http.StatusSeeOther)
	other.apiError(other.get("/auth/session"), 401, "")
}

func TestSessionExpires(t *testing.T) {
	e := newEnv(t, false)
	c := e.client(t)
	c.register("alice")
	e.clk.advance(23 * time.Hour)
	c.want(c.get("/auth/session"), 200) // activity extends the idle timeout
	e.clk.advance(23 * time.Hour)
	c.want(c.get("/auth/session"), 200)
	e.clk.advance(25 * time.Hour)
	c.apiError(c.get("/auth/session"), 401, api.CodeUnauthenticated)
	c.apiError(c.json("/auth/role", api.RoleRequest{Role: "dev"}), 401, api.CodeUnauthenticated)
	// Garbage cookies are just "not signed in".
	for _, v := range []string{"x", strings.Repeat("A", 43), "", "%%%"} {
		c2 := e.client(t)
		c2.apiError(c2.get("/auth/session", "Cookie", auth.InsecureCookieName+"="+v), 401, api.CodeUnauthenticated)
	}
}

func TestToken(t *testing.T) {
	e := newEnv(t, false)
	browser := e.client(t)
	reg := browser.register("alice")
	cli := e.client(t)

	var tok api.Token
	cli.want(cli.json("/auth/token", api.TokenRequest{Username: "alice", Password: goodPassword, Name: "laptop CLI"}), http.StatusCreated).decode(&tok)
	if !strings.HasPrefix(tok.Secret, auth.TokenPrefix) || tok.Name != "laptop CLI" || tok.ID == "" || !strings.HasPrefix(tok.Secret, tok.Prefix) {
		t.Fatalf("token %+v", tok)
	}
	if cli.cookie(auth.InsecureCookieName) != "" {
		t.Error("/auth/token set a session cookie")
	}
	bearer := []string{"Authorization", "Bearer " + tok.Secret}
	var s api.Session
	cli.want(cli.get("/auth/session", bearer...), 200).decode(&s)
	if !reflect.DeepEqual(s.User, reg.User) || s.CSRFToken != "" {
		t.Errorf("token session %+v: want alice and no CSRF token", s)
	}
	// Token callers need no CSRF token.
	cli.want(cli.json("/auth/role", api.RoleRequest{Role: "dev"}, bearer...), http.StatusNoContent)
	// A bad bearer is not rescued by a good cookie.
	browser.apiError(browser.get("/auth/session", "Authorization", "Bearer pdk_nope"), 401, api.CodeUnauthenticated)
	if err := e.auth.RevokeAPIToken(t.Context(), reg.User.ID, tok.ID); err != nil {
		t.Fatal(err)
	}
	cli.apiError(cli.get("/auth/session", bearer...), 401, api.CodeUnauthenticated)

	cli.apiError(cli.json("/auth/token", api.TokenRequest{Username: "alice", Password: goodPassword}), 400, api.CodeInvalidArgument)
	cli.apiError(cli.form("/auth/token", url.Values{"username": {"alice"}, "password": {goodPassword}, "name": {"x"}}), 415, api.CodeUnsupportedMedia)
	// Limited exactly like /auth/login: they share the buckets.
	for range 3 {
		cli.apiError(cli.json("/auth/token", api.TokenRequest{Username: "alice", Password: "wrong password", Name: "x"}), 401, api.CodeUnauthenticated)
	}
	for range 2 {
		cli.apiError(cli.json("/auth/login", api.Credentials{Username: "alice", Password: "wrong password"}), 401, api.CodeUnauthenticated)
	}
	r := cli.json("/auth/token", api.TokenRequest{Username: "alice", Password: goodPassword, Name: "x"})
	cli.apiError(r, http.StatusTooManyRequests, api.CodeLimitExceeded)
	if r.Header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
}

func TestRole(t *testing.T) {
	e := newEnv(t, false)
	c := e.client(t)
	c.register("alice")

	c.apiError(c.json("/auth/role", api.RoleRequest{Role: "dev"}), 403, api.CodePermissionDenied)
	c.apiError(c.json("/auth/role", api.RoleRequest{Role: "staging"}, auth.CSRFHeader, c.csrf()), 400, api.CodeInvalidArgument)
	r := c.want(c.json("/auth/role", api.RoleRequest{Role: "dev"}, auth.CSRFHeader, c.csrf()), http.StatusNoContent)
	ck := r.Cookies()
	if len(ck) != 1 || ck[0].Name != RoleCookie || ck[0].Value != "dev" || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteLaxMode || ck[0].Path != "/" || ck[0].Secure {
		t.Errorf("role cookie %+v", ck)
	}
	var s api.Session
	c.want(c.get("/auth/session"), 200).decode(&s)
	if s.Role != api.RoleDev {
		t.Errorf("role %q after switching to dev", s.Role)
	}
	// The form on /login switches back and goes Home.
	r = c.want(c.form("/auth/role", url.Values{"role": {"live"}, auth.CSRFFormField: {c.csrf()}}), http.StatusSeeOther)
	if r.Header.Get("Location") != testHome {
		t.Errorf("Location %q", r.Header.Get("Location"))
	}
	c.want(c.get("/auth/session"), 200).decode(&s)
	if s.Role != api.RoleLive {
		t.Errorf("role %q after switching to live", s.Role)
	}
	r = c.form("/auth/role", url.Values{"role": {"dev"}})
	if r.StatusCode != 403 || !strings.Contains(r.body, "CSRF") {
		t.Errorf("form without token: %d\n%s", r.StatusCode, r.body)
	}
	// Anonymous: 401; a forged role cookie value reads as live.
	anon := e.client(t)
	anon.apiError(anon.json("/auth/role", api.RoleRequest{Role: "dev"}), 401, api.CodeUnauthenticated)
	c.want(c.get("/auth/session", "Cookie", RoleCookie+"=admin; "+auth.InsecureCookieName+"="+c.cookie(auth.InsecureCookieName)), 200).decode(&s)
	if s.Role != api.RoleLive {
		t.Errorf("forged role cookie read as %q", s.Role)
	}
	// Logout clears the role.
	c.want(c.json("/auth/role", api.RoleRequest{Role: "dev"}, auth.CSRFHeader, c.csrf()), 204)
	c.want(c.do("POST", "/auth/logout", "", "", auth.CSRFHeader, c.csrf()), 204)
	if c.cookie(RoleCookie) != "" {
		t.Error("role cookie survived logout")
	}
}

// Malformed, oversize and mistyped bodies get precise 4xx JSON errors, never a 500.
func TestBadBodies(t *testing.T) {
	e := newEnv(t, false)
	c := e.client(t)
	c.register("alice")
	csrf := c.csrf()
	big := strings.Repeat("a", MaxBody+1)
	const (
		js   = "application/json"
		form = "application/x-www-form-urlencoded"
	)
	for _, path := range []string{"/auth/login", "/auth/register", "/auth/recovery", "/auth/token", "/auth/role", "/auth/logout"} {
		for _, tc := range []struct {
			name, ct, body string
			status         int
			code, msg      string
		}{
			{"oversize json", js, `{"username":"` + big + `"}`, 413, api.CodeTooLarge, "over 65536 bytes"},
			{"oversize form", form, "username=" + big, 413, api.CodeTooLarge, "over 65536 bytes"},
			{"malformed", js, `{"username":`, 400, api.CodeInvalidArgument, "ends early"},
			{"syntax", js, `{"username" "x"}`, 400, api.CodeInvalidArgument, "malformed JSON"},
			{"unknown field", js, `{"bogus":1}`, 400, api.CodeInvalidArgument, `unknown field "bogus"`},
			{"two values", js, `{} {}`, 400, api.CodeInvalidArgument, "more than one JSON value"},
			{"wrong type", js, `{"username":7,"role":7}`, 400, api.CodeInvalidArgument, "want string"},
			{"text/plain", "text/plain", `{}`, 415, api.CodeUnsupportedMedia, "want application/json"},
			{"multipart", "multipart/form-data; boundary=x", "--x--", 415, api.CodeUnsupportedMedia, ""},
			{"bad content type", "application/", `{}`, 415, api.CodeUnsupportedMedia, ""},
		} {
			if path == "/auth/logout" && tc.name == "unknown field" {
				tc.msg = `unknown field "bogus"`
			}
			if (path == "/auth/logout" || path == "/auth/role") && tc.name == "wrong type" {
				tc.status, tc.msg, tc.code = 400, "unknown field", api.CodeInvalidArgument
			}
			if path == "/auth/token" && tc.ct == form {
				tc.status, tc.code, tc.msg = 415, api.CodeUnsupportedMedia, "takes a JSON body"
			}
			t.Run(path+"/"+tc.name, func(t *testing.T) {
				c := &client{t: t, c: c.c, base: c.base}
				r := c.do("POST", path, tc.ct, tc.body, auth.CSRFHeader, csrf)
				if tc.ct == form && path != "/auth/token" {
					// Forms from the pages get the page (or the error page) back, same status.
					if r.StatusCode != tc.status || !strings.Contains(r.body, tc.msg) {
						t.Fatalf("status %d, want %d with %q: %.300s", r.StatusCode, tc.status, tc.msg, r.body)
					}
					return
				}
				eb := c.apiError(r, tc.status, tc.code)
				if !strings.Contains(eb.Message, tc.msg) {
					t.Errorf("message %q lacks %q", eb.Message, tc.msg)
				}
			})
		}
	}
	// The session survived all that.
	c.want(c.get("/auth/session"), 200)
}

// Over TLS every control-plane cookie is __Host- prefixed and Secure, and the
// plain names are not honoured.
func TestTLSCookies(t *testing.T) {
	e := newEnv(t, true)
	c := e.client(t)
	r := c.want(c.json("/auth/register", api.Credentials{Username: "alice", Password: goodPassword}), http.StatusCreated)
	if ck := r.Cookies(); len(ck) != 1 || ck[0].Name != auth.CookieName || !ck[0].Secure || !ck[0].HttpOnly {
		t.Errorf("session cookie %+v", ck)
	}
	r = c.want(c.json("/auth/role", api.RoleRequest{Role: "dev"}, auth.CSRFHeader, c.csrf()), http.StatusNoContent)
	if ck := r.Cookies(); len(ck) != 1 || ck[0].Name != SecureRoleCookie || !ck[0].Secure {
		t.Errorf("role cookie %+v", ck)
	}
	var s api.Session
	c.want(c.get("/auth/session"), 200).decode(&s)
	if s.Role != api.RoleDev {
		t.Errorf("role %q", s.Role)
	}
	c2 := e.client(t)
	c2.want(c2.get("/auth/session", "Cookie", auth.CookieName+"="+c.cookie(auth.CookieName)+"; "+RoleCookie+"=dev"), 200).decode(&s)
	if s.Role != api.RoleLive {
		t.Errorf("plain role cookie honoured over TLS: %q", s.Role)
	}
}

func TestReservedCookies(t *testing.T) {
	got := ReservedCookies()
	for _, name := range []string{auth.CookieName, auth.InsecureCookieName, RoleCookie, SecureRoleCookie} {
		if !slices.Contains(got, name) {
			t.Errorf("ReservedCookies() = %v lacks %s", got, name)
		}
	}
}

func TestNewRejectsForeignHome(t *testing.T) {
	e := newEnv(t, false)
	for _, home := range []string{"https://evil.example/", "//evil.example/", "app", "/\\evil"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Home %q accepted", home)
				}
			}()
			New(Options{Auth: e.auth, Home: home})
		}()
	}
}
