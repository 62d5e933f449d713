package server_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/store"
)

// bearer sends a request with an API token.
func bearer(t *testing.T, e *servertest.Env, tok, method, path string, body any) *http.Response {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, _ := http.NewRequest(method, e.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+tok)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestTokenScopes: every route checks the scope it needs, and a token cannot mint a
// broader or longer-lived one.
func TestTokenScopes(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	mint := func(req api.CreateTokenRequest) api.Token {
		t.Helper()
		var tok api.Token
		alice.MustJSON("POST", "/api/v1/tokens", req, http.StatusCreated, &tok)
		return tok
	}
	read := mint(api.CreateTokenRequest{Name: "read", Scopes: []string{"read"}, ExpiresIn: "1h"})
	if strings.Join(read.Scopes, " ") != "read" || read.ExpiresAt == nil || time.Until(*read.ExpiresAt) > time.Hour {
		t.Fatalf("minted %+v", read)
	}
	for _, tc := range []struct {
		method, path string
		body         any
		scope        string // "" when allowed
	}{
		{"GET", "/api/v1/me", nil, ""},
		{"GET", "/api/v1/sandboxes", nil, ""},
		{"PUT", "/api/v1/me/secrets/x", api.PutSecretRequest{Value: "v"}, "write"},
		{"POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "x"}, "write"},
		{"GET", "/api/v1/tokens", nil, "tokens"},
		{"POST", "/api/v1/tokens", api.CreateTokenRequest{Name: "more"}, "tokens"},
		{"GET", "/api/v1/sandboxes/sb-none/exec/stream", nil, "write"},
		{"GET", "/", nil, "write"},
	} {
		resp := bearer(t, e, read.Secret, tc.method, tc.path, tc.body)
		if tc.scope == "" {
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s %s with scope read: %d", tc.method, tc.path, resp.StatusCode)
			}
			resp.Body.Close()
			continue
		}
		got := servertest.ErrorOf(t, resp, http.StatusForbidden)
		if !strings.Contains(got.Message, `scope "`+tc.scope+`"`) {
			t.Errorf("%s %s: %q, want the scope %s named", tc.method, tc.path, got.Message, tc.scope)
		}
	}
	evs, _ := e.Server.Store().ListAudit(t.Context(), store.AuditFilter{Action: "auth.token.scope_denied"})
	if len(evs) == 0 {
		t.Error("no auth.token.scope_denied event")
	}
	// GET /api/v1/me says what the credentials may do: the token's scopes, or all of the
	// user's for a session (so a client such as paddock mcp can offer only what works).
	var me api.User
	servertest.Decode(t, bearer(t, e, read.Secret, "GET", "/api/v1/me", nil), http.StatusOK, &me)
	if strings.Join(me.Scopes, " ") != "read" {
		t.Errorf("GET /api/v1/me with a read token: scopes %q, want [read]", me.Scopes)
	}
	servertest.Decode(t, alice.Do("GET", "/api/v1/me", nil), http.StatusOK, &me)
	if strings.Join(me.Scopes, " ") != "read write tokens" {
		t.Errorf("GET /api/v1/me with a session: scopes %q, want [read write tokens]", me.Scopes)
	}

	// A token with scope tokens mints only within itself.
	parent := mint(api.CreateTokenRequest{Name: "parent", Scopes: []string{"read", "tokens"}, ExpiresIn: "2h"})
	for _, tc := range []struct {
		req  api.CreateTokenRequest
		want int
		says string
	}{
		{api.CreateTokenRequest{Name: "c", Scopes: []string{"read"}, ExpiresIn: "1h"}, 201, ""},
		{api.CreateTokenRequest{Name: "c", Scopes: []string{"read", "write"}}, 403, `scope "write"`},
		{api.CreateTokenRequest{Name: "c", Scopes: []string{"read"}, ExpiresIn: "3h"}, 403, "outlive"},
		{api.CreateTokenRequest{Name: "c", Scopes: []string{"admin"}}, 403, `scope "admin"`},
		{api.CreateTokenRequest{Name: "c", Scopes: []string{"sudo"}}, 400, `scope "sudo"`},
		{api.CreateTokenRequest{Name: "c", ExpiresIn: "forever"}, 400, "expires_in"},
		{api.CreateTokenRequest{Name: "c", ExpiresIn: "100000h"}, 400, "max_ttl"},
	} {
		resp := bearer(t, e, parent.Secret, "POST", "/api/v1/tokens", tc.req)
		if tc.want == 201 {
			var child api.Token
			servertest.Decode(t, resp, 201, &child)
			if child.ExpiresAt.After(*parent.ExpiresAt) {
				t.Errorf("child expires %v after parent %v", child.ExpiresAt, parent.ExpiresAt)
			}
			continue
		}
		if got := servertest.ErrorOf(t, resp, tc.want); !strings.Contains(got.Message, tc.says) {
			t.Errorf("mint %+v: %q, want %q in it", tc.req, got.Message, tc.says)
		}
	}

	// The listing shows scopes and expiry.
	var list api.TokenList
	alice.MustJSON("GET", "/api/v1/tokens", nil, 200, &list)
	for _, tok := range list.Tokens {
		if tok.ExpiresAt == nil || len(tok.Scopes) == 0 {
			t.Errorf("listed token without expiry or scopes: %+v", tok)
		}
	}
}

// TestRecoveryRevokesTokens: a recovery ends the API tokens as well as the sessions.
func TestRecoveryRevokesTokens(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	resp := alice.DoToken("GET", "/api/v1/me", nil)
	servertest.Decode(t, resp, 200, nil)
	body, _ := json.Marshal(api.RecoverRequest{Username: "alice", RecoveryCode: alice.Recovery[0], NewPassword: "a wholly new passphrase"})
	resp, err := http.Post(e.URL+"/auth/recovery", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	servertest.Decode(t, resp, http.StatusNoContent, nil)
	resp = alice.DoToken("GET", "/api/v1/me", nil)
	servertest.ErrorOf(t, resp, http.StatusUnauthorized)
}
