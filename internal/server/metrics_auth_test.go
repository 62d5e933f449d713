package server_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
)

// /metrics answered anyone who reached the port; now it takes the metrics token or an
// admin (session, or API token with scope admin).
func TestMetricsNeedAToken(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "metrics.token")
	metricsToken := strings.Repeat("m3tr1cs", 6)
	if err := os.WriteFile(tokenFile, []byte(metricsToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := servertest.Start(t, func(c *server.Config) { c.Metrics.TokenFile = tokenFile })
	_, pw, err := e.Server.FirstAdmin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	admin := e.Token(t, "admin", pw)
	alice := e.Register(t, "alice")
	var narrow api.Token
	servertest.Decode(t, bearer(t, e, admin, "POST", "/api/v1/tokens", api.CreateTokenRequest{Name: "ro", Scopes: []string{"read"}}), http.StatusCreated, &narrow)

	resp, err := http.Get(e.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if got := servertest.ErrorOf(t, resp, http.StatusUnauthorized); !strings.Contains(got.Message, "metrics.token_file") {
		t.Errorf("anonymous: %q", got.Message)
	}
	servertest.ErrorOf(t, bearer(t, e, "not-the-metrics-token-but-long-enough-000", "GET", "/metrics", nil), http.StatusUnauthorized)
	servertest.ErrorOf(t, bearer(t, e, alice.Token, "GET", "/metrics", nil), http.StatusForbidden)
	if got := servertest.ErrorOf(t, bearer(t, e, narrow.Secret, "GET", "/metrics", nil), http.StatusForbidden); !strings.Contains(got.Message, `scope "admin"`) {
		t.Errorf("admin token without scope admin: %q", got.Message)
	}
	for name, tok := range map[string]string{"metrics token": metricsToken, "admin token": admin} {
		resp := bearer(t, e, tok, "GET", "/metrics", nil)
		body := make([]byte, 1<<16)
		n, _ := resp.Body.Read(body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body[:n]), "# HELP") {
			t.Errorf("%s: %d", name, resp.StatusCode)
		}
	}
	// A short token file stops the start, naming the field.
	short := filepath.Join(t.TempDir(), "short")
	os.WriteFile(short, []byte("abc"), 0o600)
	cfg := e.Config
	cfg.Runner.DataDir = t.TempDir()
	cfg.Metrics.TokenFile = short
	if _, err := server.New(context.Background(), cfg, nil, server.Options{AuthOptions: servertest.CheapAuth()}); err == nil || !strings.Contains(err.Error(), "metrics.token_file") {
		t.Errorf("a short metrics token: %v", err)
	}
}
