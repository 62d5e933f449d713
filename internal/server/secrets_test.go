package server_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/secrets"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/testenv"
)

// startLogged is servertest.Start with the secrets key in a key file (not the
// environment), returning everything the server logs at debug level.
func startLogged(t *testing.T) (*servertest.Env, *servertest.LogBuffer) {
	t.Helper()
	t.Setenv(secrets.EnvKey, "")
	e := servertest.Start(t)
	return e, e.Logs
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// The contract: PUT sets a value and answers its description, GET lists without values,
// DELETE removes; /me/secrets and /api/v1/me/secrets are the same routes, by cookie (with
// CSRF) or token. Each change is an event that names the secret and its version only.
func TestSecretsRoundTrip(t *testing.T) {
	e, logs := startLogged(t)
	alice := e.Register(t, "alice")
	const v1, v2 = "ghp_canary-first-0b1c2d", "ghp_canary-second \"quoted\" é ✓"
	var s1, s2 api.Secret
	alice.MustJSON("PUT", "/me/secrets/github", api.PutSecretRequest{Value: v1}, http.StatusOK, &s1)
	if s1.Name != "github" || s1.Version != 1 || s1.CreatedAt.IsZero() {
		t.Fatalf("first PUT: %+v", s1)
	}
	servertest.Decode(t, alice.DoToken("PUT", "/api/v1/me/secrets/github", api.PutSecretRequest{Value: v2}), http.StatusOK, &s2)
	if s2.Version != 2 || !s2.CreatedAt.Equal(s1.CreatedAt) || s2.UpdatedAt.Before(s1.UpdatedAt) {
		t.Fatalf("second PUT: %+v after %+v", s2, s1)
	}
	// The value went in whole, and comes out only through the store.
	v, info, err := e.Server.Secrets().Get(context.Background(), alice.User.ID, "github")
	if err != nil || string(v.Reveal()) != v2 || info.Version != 2 {
		t.Fatalf("stored: %v %+v", err, info)
	}
	for _, path := range []string{"/me/secrets", "/api/v1/me/secrets"} {
		for _, resp := range []*http.Response{alice.Do("GET", path, nil), alice.DoToken("GET", path, nil)} {
			text := body(t, resp)
			if resp.StatusCode != http.StatusOK || !strings.Contains(text, `"name":"github","version":2`) || strings.Contains(text, "canary") {
				t.Fatalf("GET %s: %d %s", path, resp.StatusCode, text)
			}
		}
	}
	if resp := alice.Do("DELETE", "/me/secrets/github", nil); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", resp.StatusCode, body(t, resp))
	}
	var list api.SecretList
	alice.MustJSON("GET", "/me/secrets", nil, http.StatusOK, &list)
	if list.Secrets == nil || len(list.Secrets) != 0 {
		t.Fatalf("after DELETE: %+v", list)
	}
	if got := servertest.ErrorOf(t, alice.DoToken("DELETE", "/api/v1/me/secrets/github", nil), http.StatusNotFound); got.Message != `secret "github": not found` {
		t.Errorf("second DELETE: %+v", got)
	}
	// Events: put, put, delete, with name and version, and nowhere the value.
	var evs api.EventList
	alice.MustJSON("GET", "/api/v1/events?limit=1000", nil, http.StatusOK, &evs)
	var seen []string
	for _, ev := range evs.Events {
		if strings.HasPrefix(ev.Action, "secret.") {
			seen = append(seen, fmt.Sprintf("%s %s %v", ev.Action, ev.Target, ev.Detail["version"]))
		}
	}
	if strings.Join(seen, ", ") != "secret.delete github 2, secret.put github 2, secret.put github 1" {
		t.Errorf("events: %v", seen)
	}
	resp := alice.Do("GET", "/api/v1/events?limit=1000", nil)
	if text := body(t, resp); strings.Contains(text, "canary") {
		t.Errorf("the events show a value: %s", text)
	}
	if strings.Contains(logs.String(), "canary") {
		t.Errorf("the server logged a value:\n%s", logs.String())
	}
}

// A user sees and touches only their own secrets: another's name is not found, like a
// missing one, and the same name is a different secret.
func TestSecretsArePerUser(t *testing.T) {
	e := servertest.Start(t)
	alice, bob := e.Register(t, "alice"), e.Register(t, "bob")
	alice.MustJSON("PUT", "/me/secrets/token", api.PutSecretRequest{Value: "alice's"}, http.StatusOK, nil)
	var list api.SecretList
	bob.MustJSON("GET", "/me/secrets", nil, http.StatusOK, &list)
	if len(list.Secrets) != 0 {
		t.Fatalf("bob sees %+v", list)
	}
	servertest.ErrorOf(t, bob.Do("DELETE", "/me/secrets/token", nil), http.StatusNotFound)
	servertest.ErrorOf(t, bob.DoToken("DELETE", "/api/v1/me/secrets/token", nil), http.StatusNotFound)
	var s api.Secret
	bob.MustJSON("PUT", "/me/secrets/token", api.PutSecretRequest{Value: "bob's"}, http.StatusOK, &s)
	if s.Version != 1 {
		t.Errorf("bob's own secret of the same name: %+v", s)
	}
	for user, want := range map[string]string{alice.User.ID: "alice's", bob.User.ID: "bob's"} {
		v, _, err := e.Server.Secrets().Get(context.Background(), user, "token")
		if err != nil || string(v.Reveal()) != want {
			t.Errorf("%s's value: %v", user, err)
		}
	}
}

// Without credentials every secrets route answers 401 in the error shape: the paths are
// the control plane's, never proxied to a sandbox; and a cookie without the CSRF token
// changes nothing.
func TestSecretsNeedAuthentication(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	for _, prefix := range []string{"/me/secrets", "/api/v1/me/secrets"} {
		for _, r := range []struct{ method, path string }{{"GET", ""}, {"PUT", "/a"}, {"DELETE", "/a"}} {
			req, _ := http.NewRequest(r.method, e.URL+prefix+r.path, strings.NewReader(`{"value":"x"}`))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if got := servertest.ErrorOf(t, resp, http.StatusUnauthorized); got.Code != api.CodeUnauthenticated || resp.Header.Get(api.HeaderSandbox) != "" {
				t.Errorf("%s %s%s: %+v", r.method, prefix, r.path, got)
			}
		}
	}
	csrf := alice.CSRF
	alice.CSRF = ""
	servertest.ErrorOf(t, alice.Do("PUT", "/me/secrets/a", api.PutSecretRequest{Value: "x"}), http.StatusForbidden)
	alice.CSRF = csrf
	var list api.SecretList
	alice.MustJSON("GET", "/me/secrets", nil, http.StatusOK, &list)
	if len(list.Secrets) != 0 {
		t.Errorf("a PUT without the CSRF token stored %+v", list)
	}
}

// Bad input gets a precise 4xx in the error shape, never a 500, and stores nothing.
func TestSecretsBadInput(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	big := strings.Repeat("x", secrets.MaxValueSize+1)
	tests := []struct {
		name, method, path string
		body               any
		contentType        string
		status             int
		code, msg          string
	}{
		{"upper-case name", "PUT", "/me/secrets/GitHub", api.PutSecretRequest{Value: "v"}, "", 400, api.CodeInvalidArgument, `secret name "GitHub": want 1 to 64 characters of a-z, 0-9`},
		{"name with a dot first", "PUT", "/me/secrets/.env", api.PutSecretRequest{Value: "v"}, "", 400, api.CodeInvalidArgument, "starting with a letter or digit"},
		{"escaped slash", "PUT", "/me/secrets/a%2Fb", api.PutSecretRequest{Value: "v"}, "", 400, api.CodeInvalidArgument, `secret name "a/b"`},
		{"long name", "PUT", "/api/v1/me/secrets/" + strings.Repeat("a", 65), api.PutSecretRequest{Value: "v"}, "", 400, api.CodeInvalidArgument, "1 to 64 characters"},
		{"bad name on delete", "DELETE", "/me/secrets/A", nil, "", 400, api.CodeInvalidArgument, `secret name "A"`},
		{"empty value", "PUT", "/me/secrets/a", api.PutSecretRequest{Value: ""}, "", 400, api.CodeInvalidArgument, `secret "a": the value is empty`},
		{"no value field", "PUT", "/me/secrets/a", `{}`, "", 400, api.CodeInvalidArgument, "the value is empty"},
		{"value over the limit", "PUT", "/me/secrets/a", api.PutSecretRequest{Value: big}, "", 413, api.CodeTooLarge, `secret "a": the value is over the limit of 65536 bytes (64 KiB)`},
		{"body over the limit", "PUT", "/me/secrets/a", `{"value":"` + strings.Repeat("x", 1<<20) + `"}`, "", 413, api.CodeTooLarge, "over the limit of 65536 bytes"},
		{"unknown field", "PUT", "/me/secrets/a", `{"value":"v","ttl":3}`, "", 400, api.CodeInvalidArgument, `unknown field "ttl"`},
		{"malformed JSON", "PUT", "/me/secrets/a", `{"value":`, "", 400, api.CodeInvalidArgument, "JSON ends early"},
		{"not an object", "PUT", "/me/secrets/a", `"v"`, "", 400, api.CodeInvalidArgument, "request body"},
		{"value not a string", "PUT", "/me/secrets/a", `{"value":42}`, "", 400, api.CodeInvalidArgument, "field value"},
		{"two values", "PUT", "/me/secrets/a", `{"value":"v"}{"value":"w"}`, "", 400, api.CodeInvalidArgument, "more than one JSON value"},
		{"not JSON", "PUT", "/me/secrets/a", strings.NewReader("v"), "text/plain", 415, api.CodeUnsupportedMedia, "want application/json"},
		{"wrong method", "POST", "/me/secrets/a", api.PutSecretRequest{Value: "v"}, "", 405, api.CodeMethodNotAllowed, "use PUT or DELETE"},
		{"GET of a value", "GET", "/api/v1/me/secrets/a", nil, "", 405, api.CodeMethodNotAllowed, "use PUT or DELETE"},
		{"deeper path", "PUT", "/me/secrets/a/b", api.PutSecretRequest{Value: "v"}, "", 404, api.CodeNotFound, "no API endpoint /me/secrets/a/b"},
		{"missing", "DELETE", "/me/secrets/nope", nil, "", 404, api.CodeNotFound, `secret "nope": not found`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var resp *http.Response
			if tt.contentType != "" {
				req, _ := http.NewRequest(tt.method, e.URL+tt.path, tt.body.(io.Reader))
				req.Header.Set("Content-Type", tt.contentType)
				req.Header.Set("Authorization", "Bearer "+alice.Token)
				var err error
				if resp, err = http.DefaultClient.Do(req); err != nil {
					t.Fatal(err)
				}
			} else {
				resp = alice.DoToken(tt.method, tt.path, tt.body)
			}
			got := servertest.ErrorOf(t, resp, tt.status)
			if got.Code != tt.code || !strings.Contains(got.Message, tt.msg) {
				t.Fatalf("%s %s: %+v; want %s containing %q", tt.method, tt.path, got, tt.code, tt.msg)
			}
			if strings.Contains(got.Message, "xxxxxxxx") {
				t.Fatalf("the error echoes the value: %.200s", got.Message)
			}
		})
	}
	var list api.SecretList
	alice.MustJSON("GET", "/me/secrets", nil, http.StatusOK, &list)
	if len(list.Secrets) != 0 {
		t.Errorf("bad input stored %+v", list)
	}
	// The per-user limit.
	for i := range secrets.MaxPerUser {
		servertest.Decode(t, alice.DoToken("PUT", fmt.Sprintf("/me/secrets/s%d", i), api.PutSecretRequest{Value: "v"}), http.StatusOK, nil)
	}
	if got := servertest.ErrorOf(t, alice.DoToken("PUT", "/me/secrets/one-more", api.PutSecretRequest{Value: "v"}), http.StatusTooManyRequests); got.Code != api.CodeLimitExceeded || !strings.Contains(got.Message, "100 secrets") {
		t.Errorf("over the limit: %+v", got)
	}
}

// A server whose secrets key is not the one its database was written with refuses to
// start, and says which key and what to do.
func TestServerRefusesWrongSecretsKey(t *testing.T) {
	t.Setenv(secrets.EnvKey, "")
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	alice.MustJSON("PUT", "/me/secrets/a", api.PutSecretRequest{Value: "v"}, http.StatusOK, nil)
	e.Stop(true)
	keyFile := filepath.Join(e.Config.Runner.DataDir, secrets.KeyFileName)
	other := fmt.Sprintf("paddock-keyring 1\nprimary 1\nkey 1 %s\n", base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)))
	if err := os.WriteFile(keyFile, []byte(other), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := server.New(context.Background(), e.Config, testenv.Logger(t), server.Options{})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "key version 1 in the key file "+keyFile+" is not the key the database") {
		t.Fatalf("server.New with a wrong key: %v", err)
	}
}
