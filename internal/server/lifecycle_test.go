package server_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
)

func execIn(t *testing.T, c *servertest.Client, id string, req api.ExecRequest) api.ExecResult {
	t.Helper()
	var res api.ExecResult
	servertest.Decode(t, c.DoToken("POST", "/api/v1/sandboxes/"+id+"/exec", req), http.StatusOK, &res)
	return res
}

// The admin lifecycle, end to end through the API with a token: create, exec, files, stop,
// start (the workspace survives), restart, delete; quotas.
func TestSandboxLifecycle(t *testing.T) {
	e := servertest.Start(t, func(c *server.Config) { c.Quota.Sandboxes = 2 })
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work", Limits: api.Limits{Memory: "256M"}}), http.StatusCreated, &sb)
	if sb.State != api.StateRunning || sb.Name != "work" || sb.Limits.MemoryBytes != 256<<20 || sb.Owner != alice.User.ID {
		t.Fatalf("created %+v", sb)
	}
	res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo out; echo err >&2; cat; exit 3"}, Stdin: []byte("in\n")})
	if string(res.Stdout) != "out\nin\n" || string(res.Stderr) != "err\n" || res.ExitCode != 3 {
		t.Errorf("exec: %+v", res)
	}
	// env adds to the sandbox's environment: PATH and the sandbox's own variables stay.
	res = execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo $A $PADDOCK_SANDBOX_ID"}, Env: []string{"A=b"}})
	if string(res.Stdout) != "b "+sb.ID+"\n" {
		t.Errorf("exec with env: %q %q (exit %d)", res.Stdout, res.Stderr, res.ExitCode)
	}
	res = execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sleep", "10"}, TimeoutMS: 200})
	if !res.TimedOut {
		t.Errorf("timeout: %+v", res)
	}
	res = execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"head", "-c", "5000", "/dev/zero"}, MaxOutputBytes: 1000})
	if len(res.Stdout) != 1000 || !res.StdoutTruncated {
		t.Errorf("bounded output: %d bytes, truncated %v", len(res.Stdout), res.StdoutTruncated)
	}
	// Files: write, read, list.
	var fi api.FileInfo
	servertest.Decode(t, alice.DoToken("PUT", "/api/v1/sandboxes/"+sb.ID+"/files/content?path=src/hello.txt", bytes.NewReader([]byte("hello\x00bytes"))), http.StatusOK, &fi)
	if fi.Size != 11 {
		t.Errorf("written %+v", fi)
	}
	resp := alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID+"/files/content?path=src/hello.txt", nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "hello\x00bytes" {
		t.Errorf("read back %d %q", resp.StatusCode, body)
	}
	var list api.FileList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID+"/files/list?path=src", nil), http.StatusOK, &list)
	if len(list.Entries) != 1 || list.Entries[0].Name != "hello.txt" {
		t.Errorf("list %+v", list)
	}
	servertest.ErrorOf(t, alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID+"/files/content?path=nope", nil), http.StatusNotFound)
	servertest.ErrorOf(t, alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID+"/files/content?path=../../etc/passwd", nil), http.StatusBadRequest)

	// Stop: exec is refused with a 409 that says to start it; start: the workspace is kept.
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/stop", nil), http.StatusOK, &sb)
	if sb.State != api.StateStopped {
		t.Errorf("after stop: %s", sb.State)
	}
	if e := servertest.ErrorOf(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/exec", api.ExecRequest{Argv: []string{"true"}}), http.StatusConflict); !strings.Contains(e.Message, "not running") {
		t.Errorf("exec on stopped: %+v", e)
	}
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/start", nil), http.StatusOK, &sb)
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"cat", "src/hello.txt"}}); string(res.Stdout) != "hello\x00bytes" {
		t.Errorf("after restart the workspace lost its file: %+v", res)
	}
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/restart", nil), http.StatusOK, &sb)
	if sb.State != api.StateRunning {
		t.Errorf("after restart: %+v", sb)
	}
	// Quota: two sandboxes; the third is refused with 429 and the reason.
	var second api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{}), http.StatusCreated, &second)
	if e := servertest.ErrorOf(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{}), http.StatusTooManyRequests); !strings.Contains(e.Message, "quota") {
		t.Errorf("quota: %+v", e)
	}
	var all api.SandboxList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes", nil), http.StatusOK, &all)
	if len(all.Sandboxes) != 2 {
		t.Errorf("list: %d sandboxes", len(all.Sandboxes))
	}
	// Delete: gone, and its name is free again.
	resp = alice.DoToken("DELETE", "/api/v1/sandboxes/"+sb.ID, nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d", resp.StatusCode)
	}
	servertest.ErrorOf(t, alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID, nil), http.StatusNotFound)
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work"}), http.StatusCreated, nil)
	// Every change is an event.
	var evs api.EventList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?limit=100", nil), http.StatusOK, &evs)
	seen := map[string]bool{}
	for _, ev := range evs.Events {
		seen[ev.Action] = true
	}
	for _, a := range []string{"sandbox.create", "sandbox.start", "sandbox.stop", "sandbox.delete", "sandbox.exec", "sandbox.file_write"} {
		if !seen[a] {
			t.Errorf("no %s event in %v", a, seen)
		}
	}
}

// A user sees and touches only their own sandboxes: every sandbox route answers bob's
// requests for alice's sandbox exactly as for a sandbox that does not exist.
func TestOwnershipOnEveryRoute(t *testing.T) {
	e := servertest.Start(t)
	alice, bob := e.Register(t, "alice"), e.Register(t, "bob")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{}), http.StatusCreated, &sb)
	missing := "sb-aaaaaaaaaa"
	n := 0
	for _, r := range e.Server.Routes() {
		if !strings.Contains(r.Pattern, "{id}") || !strings.HasPrefix(r.Pattern, "/api/v1/sandboxes/") {
			continue
		}
		n++
		var body any
		switch {
		case r.Method == "POST" && strings.HasSuffix(r.Pattern, "/exec"):
			body = api.ExecRequest{Argv: []string{"cat", "/etc/hostname"}}
		case r.Method == "POST" && strings.HasSuffix(r.Pattern, "/files/mkdir"):
			body = api.FileMkdirRequest{Path: "x"}
		case r.Method == "POST" && strings.HasSuffix(r.Pattern, "/files/move"):
			body = api.FileMoveRequest{From: "x", To: "y"}
		case r.Method == "POST" && strings.HasSuffix(r.Pattern, "/backups/restore"):
			body = api.BackupRestoreRequest{}
		}
		for _, id := range []string{sb.ID, missing} {
			path := strings.Replace(r.Pattern, "{id}", id, 1) + "?path=x"
			resp := bob.DoToken(r.Method, path, body)
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("bob %s %s: %d %s, want 404", r.Method, path, resp.StatusCode, data)
			}
			msg := strings.ReplaceAll(string(data), id, "ID")
			if id == sb.ID && strings.Contains(msg, "alice") {
				t.Errorf("bob's error names alice: %s", data)
			}
		}
	}
	if n < 9 {
		t.Fatalf("only %d sandbox routes checked", n)
	}
	var list api.SandboxList
	servertest.Decode(t, bob.DoToken("GET", "/api/v1/sandboxes", nil), http.StatusOK, &list)
	if len(list.Sandboxes) != 0 {
		t.Errorf("bob lists %d sandboxes", len(list.Sandboxes))
	}
	servertest.ErrorOf(t, bob.DoToken("GET", "/api/v1/sandboxes?all=true", nil), http.StatusForbidden)
	// Alice's sandbox is untouched.
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID, nil), http.StatusOK, &sb)
	if sb.State != api.StateRunning {
		t.Errorf("alice's sandbox after bob's attempts: %+v", sb)
	}
}

// Bad input gets a precise 4xx in the error shape, never a 500.
func TestBadInput(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	post := func(path, ctype, body string) *http.Response {
		req, _ := http.NewRequest("POST", e.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+alice.Token)
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	cases := []struct {
		path, ctype, body string
		status            int
		says              string
	}{
		{"/api/v1/sandboxes", "application/json", `{"name":`, 400, "ends early"},
		{"/api/v1/sandboxes", "application/json", `{"nmae":"x"}`, 400, `unknown field "nmae"`}, //nolint:misspell // a misspelled field on purpose
		{"/api/v1/sandboxes", "application/json", `{"name":"Bad Name"}`, 400, "name"},
		{"/api/v1/sandboxes", "application/json", `{"tier":"process"}`, 400, "insecure"},
		{"/api/v1/sandboxes", "application/json", `{"limits":{"memory":"lots"}}`, 400, "limits.memory"},
		{"/api/v1/sandboxes", "application/json", `{"app":{"command":["x"],"port":0}}`, 400, "app.port"},
		{"/api/v1/sandboxes", "application/json", `{"env":["NOEQUALS"]}`, 400, "env"},
		{"/api/v1/sandboxes", "application/json", `{} {}`, 400, "more than one"},
		{"/api/v1/sandboxes", "application/json", `[]`, 400, "want"},
		{"/api/v1/sandboxes", "text/plain", `{}`, 415, "application/json"},
		{"/api/v1/sandboxes", "application/json", `{"name":"` + strings.Repeat("a", 2<<20) + `"}`, 413, "over 1048576 bytes"},
		{"/api/v1/sandboxes/not-an-id/exec", "application/json", `{"argv":["true"]}`, 400, "sandbox ID"},
		{"/api/v1/sandboxes/sb-aaaaaaaaaa/exec", "application/json", `{"argv":[]}`, 400, "argv"},
		{"/api/v1/sandboxes/sb-aaaaaaaaaa/exec", "application/json", `{"argv":["x"],"timeout_ms":-1}`, 400, "timeout_ms"},
	}
	for _, tc := range cases {
		resp := post(tc.path, tc.ctype, tc.body)
		got := servertest.ErrorOf(t, resp, tc.status)
		if !strings.Contains(strings.ToLower(got.Message), strings.ToLower(tc.says)) {
			t.Errorf("POST %s %.40q: message %q does not say %q", tc.path, tc.body, got.Message, tc.says)
		}
	}
	// An expired or revoked token, and garbage, are 401s.
	for _, auth := range []string{"Bearer pdk_nope", "Bearer ", "Basic Zm9vOmJhcg==", "Bearer " + strings.Repeat("x", 5000)} {
		req, _ := http.NewRequest("GET", e.URL+"/api/v1/sandboxes", nil)
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		servertest.ErrorOf(t, resp, http.StatusUnauthorized)
	}
	// A cookie-authenticated change without the CSRF token is refused.
	req, _ := http.NewRequest("POST", e.URL+"/api/v1/sandboxes", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := alice.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	servertest.ErrorOf(t, resp, http.StatusForbidden)
	var data json.RawMessage
	servertest.Decode(t, alice.Do("GET", "/api/v1/me", nil), http.StatusOK, &data)
}
