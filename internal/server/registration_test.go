package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/auth"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/testenv"
)

func postJSON(t *testing.T, url string, v any) *http.Response {
	t.Helper()
	b, _ := json.Marshal(v)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestRegistrationByInvite: a control plane listening beyond loopback defaults to
// invite mode; an admin mints invites, a user cannot; registration needs one.
func TestRegistrationByInvite(t *testing.T) {
	cfg, err := server.LoadConfig("", testenv.Config(t).DataDir, "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Registration != "invite" {
		t.Fatalf("registration default beyond loopback: %q, want invite", cfg.Registration)
	}
	e := servertest.Start(t, func(c *server.Config) { c.Registration = cfg.Registration })
	_, pw, err := e.Server.FirstAdmin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	admin := e.Token(t, "admin", pw)

	resp := postJSON(t, e.URL+"/auth/register", api.RegisterRequest{Username: "alice", Password: "correct horse battery alice"})
	if got := servertest.ErrorOf(t, resp, http.StatusForbidden); !strings.Contains(got.Message, "registration: invite") {
		t.Errorf("no invite: %q", got.Message)
	}
	var inv api.Invite
	servertest.Decode(t, bearer(t, e, admin, "POST", "/api/v1/invites", api.CreateInviteRequest{Uses: 1, ExpiresIn: "1h"}), http.StatusCreated, &inv)
	if !strings.HasPrefix(inv.Code, "inv_") || inv.MaxUses != 1 {
		t.Fatalf("invite %+v", inv)
	}
	servertest.Decode(t, postJSON(t, e.URL+"/auth/register", api.RegisterRequest{Username: "alice", Password: "correct horse battery alice", Invite: inv.Code}), http.StatusCreated, nil)
	resp = postJSON(t, e.URL+"/auth/register", api.RegisterRequest{Username: "bob", Password: "correct horse battery bob", Invite: inv.Code})
	if got := servertest.ErrorOf(t, resp, http.StatusForbidden); !strings.Contains(got.Message, "invite code is not valid") {
		t.Errorf("a used invite: %q", got.Message)
	}
	var list api.InviteList
	servertest.Decode(t, bearer(t, e, admin, "GET", "/api/v1/invites", nil), http.StatusOK, &list)
	if len(list.Invites) != 1 || list.Invites[0].Uses != 1 || list.Invites[0].Code != "" {
		t.Errorf("invites %+v", list)
	}

	// A user may not mint invites; nor may an admin's token without scope admin.
	alice := e.Token(t, "alice", "correct horse battery alice")
	servertest.ErrorOf(t, bearer(t, e, alice, "POST", "/api/v1/invites", api.CreateInviteRequest{}), http.StatusForbidden)
	var narrow api.Token
	servertest.Decode(t, bearer(t, e, admin, "POST", "/api/v1/tokens", api.CreateTokenRequest{Name: "rw", Scopes: []string{"read", "write"}}), http.StatusCreated, &narrow)
	got := servertest.ErrorOf(t, bearer(t, e, narrow.Secret, "GET", "/api/v1/invites", nil), http.StatusForbidden)
	if !strings.Contains(got.Message, `scope "admin"`) {
		t.Errorf("admin token without scope admin: %q", got.Message)
	}
	evs, _ := e.Server.Store().ListAudit(context.Background(), store.AuditFilter{Action: "auth.register.refused"})
	if len(evs) != 2 {
		t.Errorf("%d auth.register.refused events, want 2", len(evs))
	}
}

// TestRegistrationClosedAndLimited: closed refuses naming the mode; open is limited
// per address with 429 and Retry-After.
func TestRegistrationClosedAndLimited(t *testing.T) {
	e := servertest.Start(t, func(c *server.Config) { c.Registration = "closed" })
	resp := postJSON(t, e.URL+"/auth/register", api.RegisterRequest{Username: "alice", Password: "correct horse battery alice"})
	if got := servertest.ErrorOf(t, resp, http.StatusForbidden); !strings.Contains(got.Message, "registration: closed") {
		t.Errorf("closed: %q", got.Message)
	}

	cfg := server.Config{Runner: testenv.Config(t), Listen: "127.0.0.1:0"}
	e = servertest.StartOpts(t, cfg, server.Options{AuthOptions: []auth.Option{auth.WithParams(auth.Params{Memory: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32})}})
	n := 0
	for i := range 25 {
		resp := postJSON(t, e.URL+"/auth/register", api.RegisterRequest{Username: "user" + string(rune('a'+i)) + "xx", Password: "correct horse battery staple"})
		resp.Body.Close()
		if resp.StatusCode == http.StatusCreated {
			n++
			continue
		}
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("registration %d: %d, Retry-After %q", i+1, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	if n != 10 {
		t.Errorf("%d of 25 registrations from one address succeeded, want 10", n)
	}
}

// The accounts' config keys load, default and refuse mistakes naming the field.
func TestAccountsConfig(t *testing.T) {
	dir := t.TempDir()
	load := func(yaml, listen string) (server.Config, error) {
		t.Helper()
		f := filepath.Join(dir, "paddock.yaml")
		if err := os.WriteFile(f, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return server.LoadConfig(f, dir, listen)
	}
	cfg, err := load("registration: closed\ntokens: {default_ttl: 24h, max_ttl: 720h}\nbroker_grants: {per_second: 2, burst: 10}\nmetrics: {token_file: /etc/paddock/metrics.token, listen: '127.0.0.1:9100'}\n", "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Registration != "closed" || cfg.Tokens.DefaultTTL != 24*time.Hour || cfg.Tokens.MaxTTL != 720*time.Hour ||
		cfg.BrokerGrants.PerSecond != 2 || cfg.Metrics.Listen != "127.0.0.1:9100" {
		t.Errorf("loaded %+v %+v %+v %+v", cfg.Registration, cfg.Tokens, cfg.BrokerGrants, cfg.Metrics)
	}
	for listen, want := range map[string]string{"127.0.0.1:8080": "open", "localhost:8080": "open", "0.0.0.0:8080": "invite", ":8080": "invite"} {
		if cfg, err := load("", listen); err != nil || cfg.Registration != want {
			t.Errorf("listen %s: registration %q, %v; want %s", listen, cfg.Registration, err, want)
		}
	}
	for yaml, field := range map[string]string{
		"registration: sometimes\n":                   "registration",
		"tokens: {default_ttl: 800h, max_ttl: 24h}\n": "tokens.default_ttl",
		"tokens: {max_ttl: forever}\n":                "line 1",
		"broker_grants: {per_second: -1}\n":           "broker_grants",
		"metrics: {token_file: relative/path}\n":      "metrics.token_file",
		"metrics: {listen: nowhere}\n":                "metrics.listen",
	} {
		if _, err := load(yaml, ""); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%q: %v, want an error naming %s", yaml, err, field)
		}
	}
}
