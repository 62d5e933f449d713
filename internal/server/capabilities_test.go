package server_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/capability"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
)

// holder is a client whose only credential is a capability token.
func holder(c *servertest.Client, token string) *servertest.Client {
	h := *c
	h.Token, h.HTTP, h.CSRF = token, nil, ""
	return &h
}

func mintCap(t *testing.T, c *servertest.Client, id string, req api.CapabilityRequest) api.Capability {
	t.Helper()
	var out api.Capability
	servertest.Decode(t, c.DoToken("POST", "/api/v1/sandboxes/"+id+"/capabilities", req), http.StatusCreated, &out)
	if !strings.HasPrefix(out.Token, "pdk1.") || out.Subject != "sandbox:"+id {
		t.Fatalf("minted %+v", out)
	}
	return out
}

// wantRefused checks a 403 whose message says why.
func wantRefused(t *testing.T, resp *http.Response, why string) {
	t.Helper()
	e := servertest.ErrorOf(t, resp, http.StatusForbidden)
	if !strings.Contains(e.Message, why) {
		t.Errorf("%s %s: refused with %q, want it to say %q", resp.Request.Method, resp.Request.URL.Path, e.Message, why)
	}
}

// A capability token is a credential for its sandbox's exec and file routes, within what
// it grants and no further: the path, the actions, the extensions, the size, the
// programs; not on another sandbox, not on any other route, not after revocation; and a
// holder's caveat narrows it.
func TestCapabilityTokens(t *testing.T) {
	e := servertest.Start(t, func(c *server.Config) { c.Quota.Sandboxes = 3 })
	alice, bob := e.Register(t, "alice"), e.Register(t, "bob")
	var sb, other api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work"}), http.StatusCreated, &sb)
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "other"}), http.StatusCreated, &other)
	files := "/api/v1/sandboxes/" + sb.ID + "/files/content?path="

	src := mintCap(t, alice, sb.ID, api.CapabilityRequest{Resource: "file:/workspace/src", Actions: []string{"read", "write"},
		AllowedExtensions: []string{".ts"}, MaxSize: 1000, TTLSeconds: 600})
	h := holder(alice, src.Token)
	servertest.Decode(t, h.DoToken("PUT", files+"src/a.ts", strings.NewReader("export {}\n")), http.StatusOK, nil)
	resp := h.DoToken("GET", files+"/workspace/src/a.ts", nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "export {}\n" {
		t.Fatalf("read under the token: %d %q", resp.StatusCode, body)
	}
	// allowed_extensions limits the token to files of those names: a directory is not one.
	wantRefused(t, h.DoToken("GET", "/api/v1/sandboxes/"+sb.ID+"/files/list?path=src", nil), "file name src has no extension")

	wantRefused(t, h.DoToken("PUT", files+"b.ts", strings.NewReader("x")), "outside file:/workspace/src")
	wantRefused(t, h.DoToken("PUT", files+"src/../b.ts", strings.NewReader("x")), "outside file:/workspace/src")
	wantRefused(t, h.DoToken("PUT", files+"src/a.go", strings.NewReader("x")), "allowed: .ts")
	wantRefused(t, h.DoToken("PUT", files+"src/big.ts", strings.NewReader(strings.Repeat("x", 2000))), "over max 1000")
	wantRefused(t, h.DoToken("GET", "/api/v1/sandboxes/"+sb.ID+"/files/list?path=.", nil), "outside file:/workspace/src")
	wantRefused(t, h.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/exec", api.ExecRequest{Argv: []string{"ls"}}), "outside")
	// Nothing refused was written.
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "ls -a /workspace /workspace/src"}}); strings.Contains(string(res.Stdout), "b.ts") ||
		strings.Contains(string(res.Stdout), "a.go") || strings.Contains(string(res.Stdout), "big.ts") {
		t.Errorf("a refused write left a file:\n%s", res.Stdout)
	}
	// The server sees the path as the API names it; the agent sees where it leads. A
	// symlink from the granted directory to another is refused by the agent, for reading
	// and for writing, and nothing is written.
	execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "mkdir -p /workspace/secret && echo s > /workspace/secret/x.ts && ln -s ../secret /workspace/src/link"}})
	wantRefused(t, h.DoToken("GET", files+"src/link/x.ts", nil), "resource file:/workspace/secret/x.ts outside file:/workspace/src")
	wantRefused(t, h.DoToken("PUT", files+"src/link/y.ts", strings.NewReader("x")), "resource file:/workspace/secret/y.ts outside file:/workspace/src")
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"ls", "/workspace/secret"}}); string(res.Stdout) != "x.ts\n" {
		t.Errorf("after a refused write through a symlink, secret/ holds %q", res.Stdout)
	}

	// Its sandbox only, and only the exec and file routes.
	wantRefused(t, h.DoToken("GET", "/api/v1/sandboxes/"+other.ID+"/files/content?path=src/a.ts", nil), "minted for sandbox:"+sb.ID)
	wantRefused(t, h.DoToken("GET", "/api/v1/sandboxes", nil), "acts only on its sandbox's exec and file routes")
	wantRefused(t, h.DoToken("DELETE", "/api/v1/sandboxes/"+sb.ID, nil), "acts only on its sandbox's exec and file routes")
	wantRefused(t, h.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/capabilities", api.CapabilityRequest{Resource: "exec:*", Actions: []string{"exec"}}),
		"acts only on its sandbox's exec and file routes")

	// A holder narrows its token without asking anyone; it cannot widen it.
	narrow, err := capability.Attenuate(src.Token, capability.Caveat{Resource: "file:/workspace/src/ui"})
	if err != nil {
		t.Fatal(err)
	}
	wantRefused(t, holder(alice, narrow).DoToken("PUT", files+"src/c.ts", strings.NewReader("x")), "caveat 1: resource file:/workspace/src/c.ts outside file:/workspace/src/ui")
	servertest.Decode(t, holder(alice, narrow).DoToken("PUT", files+"src/ui/c.ts", strings.NewReader("x")), http.StatusOK, nil)
	wide, err := capability.Attenuate(narrow, capability.Caveat{Resource: "file:/"})
	if err != nil {
		t.Fatal(err)
	}
	wantRefused(t, holder(alice, wide).DoToken("PUT", files+"src/d.ts", strings.NewReader("x")), "caveat 1: resource file:/workspace/src/d.ts outside file:/workspace/src/ui")
	forged := src.Token[:len(src.Token)-4] + "AAAA"
	wantRefused(t, holder(alice, forged).DoToken("GET", files+"src/a.ts", nil), "bad signature")

	// Programs: every program the command line runs must be granted.
	ls := mintCap(t, alice, sb.ID, api.CapabilityRequest{Resource: "exec:ls", Actions: []string{"exec"}})
	var res api.ExecResult
	servertest.Decode(t, holder(alice, ls.Token).DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/exec", api.ExecRequest{Argv: []string{"ls", "/workspace/src"}}), http.StatusOK, &res)
	if !strings.Contains(string(res.Stdout), "a.ts") {
		t.Errorf("ls under its token: %+v", res)
	}
	wantRefused(t, holder(alice, ls.Token).DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/exec", api.ExecRequest{Argv: []string{"cat", "/workspace/src/a.ts"}}), "resource exec:cat outside exec:ls")
	wantRefused(t, holder(alice, ls.Token).DoToken("PUT", files+"src/e.ts", strings.NewReader("x")), "outside")

	// Revoked: refused from the next request on, and the list says so.
	var revoked api.Capability
	servertest.Decode(t, alice.DoToken("DELETE", "/api/v1/sandboxes/"+sb.ID+"/capabilities/"+src.ID, nil), http.StatusOK, &revoked)
	if revoked.RevokedAt == nil || revoked.Token != "" {
		t.Errorf("revoked: %+v", revoked)
	}
	wantRefused(t, h.DoToken("GET", files+"src/a.ts", nil), "revoked")
	wantRefused(t, holder(alice, narrow).DoToken("GET", files+"src/ui/c.ts", nil), "revoked")
	var list api.CapabilityList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID+"/capabilities", nil), http.StatusOK, &list)
	if len(list.Capabilities) != 2 || list.Capabilities[0].ID != ls.ID || list.Capabilities[1].RevokedAt == nil {
		t.Errorf("list: %+v", list)
	}
	for _, c := range list.Capabilities {
		if c.Token != "" {
			t.Errorf("the list shows a token: %+v", c)
		}
	}

	// Another user's sandbox is not found, to mint, list or revoke.
	servertest.ErrorOf(t, bob.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/capabilities", api.CapabilityRequest{Resource: "exec:*", Actions: []string{"exec"}}), http.StatusNotFound)
	servertest.ErrorOf(t, bob.DoToken("GET", "/api/v1/sandboxes/"+sb.ID+"/capabilities", nil), http.StatusNotFound)
	servertest.ErrorOf(t, bob.DoToken("DELETE", "/api/v1/sandboxes/"+sb.ID+"/capabilities/"+ls.ID, nil), http.StatusNotFound)
	servertest.ErrorOf(t, alice.DoToken("DELETE", "/api/v1/sandboxes/"+other.ID+"/capabilities/"+ls.ID, nil), http.StatusNotFound)

	// The tokens never reach the audit log.
	resp = alice.Do("GET", "/api/v1/events?limit=1000", nil)
	events, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, tok := range []string{src.Token, ls.Token, narrow} {
		if strings.Contains(string(events), tok[5:40]) {
			t.Error("a capability token is in the audit log")
		}
	}
	for _, action := range []string{"sandbox.capability_mint", "sandbox.capability_revoke"} {
		if !strings.Contains(string(events), action) {
			t.Errorf("no %s event", action)
		}
	}
}

// Minting refuses bad input with a message that names the field.
func TestMintCapabilityBadInput(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work"}), http.StatusCreated, &sb)
	for _, tc := range []struct {
		req  api.CapabilityRequest
		want string
	}{
		{api.CapabilityRequest{Resource: "file:workspace", Actions: []string{"read"}}, "not an absolute path"},
		{api.CapabilityRequest{Resource: "file:/workspace", Actions: []string{"fly"}}, `"fly"`},
		{api.CapabilityRequest{Resource: "file:/workspace", Actions: []string{"exec"}}, "exec"},
		{api.CapabilityRequest{Resource: "file:/workspace"}, "action"},
		{api.CapabilityRequest{Resource: "disk:/x", Actions: []string{"read"}}, "disk"},
		{api.CapabilityRequest{Resource: "file:/workspace", Actions: []string{"read"}, TTLSeconds: api.MaxCapabilityTTL + 1}, "ttl_seconds"},
		{api.CapabilityRequest{Resource: "file:/workspace", Actions: []string{"read"}, AllowedExtensions: []string{"ts"}}, "ts"},
	} {
		e := servertest.ErrorOf(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/capabilities", tc.req), http.StatusBadRequest)
		if !strings.Contains(e.Message, tc.want) {
			t.Errorf("%+v: %q, want it to name %q", tc.req, e.Message, tc.want)
		}
	}
}

// A key rotation (paddock sandbox capability rotate-key, then SIGHUP) keeps every token
// and every running sandbox working: new tokens are signed under the new key, old ones
// still verify, and a sandbox started before the rotation, whose agent lacks the new key,
// still accepts what the control plane reissues for it. Dropping the old key (after a
// leak) stops the tokens signed under it and the sandboxes that hold nothing newer.
func TestCapabilityKeyRotation(t *testing.T) {
	e := servertest.Start(t, func(c *server.Config) { c.Quota.Sandboxes = 3 })
	alice := e.Register(t, "alice")
	create := func(name string) string {
		var sb api.Sandbox
		servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: name}), http.StatusCreated, &sb)
		return sb.ID
	}
	read := api.CapabilityRequest{Resource: "file:/workspace", Actions: []string{"read"}, TTLSeconds: 600}
	list := func(token, id string) *http.Response {
		return holder(alice, token).DoToken("GET", "/api/v1/sandboxes/"+id+"/files/list?path=.", nil)
	}
	works := func(what, token, id string) {
		t.Helper()
		resp := list(token, id)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d %s", what, resp.StatusCode, body)
		}
	}
	old := create("old")
	before := mintCap(t, alice, old, read)
	works("a token on a sandbox, before the rotation", before.Token, old)

	rot, err := server.RotateCapabilityKeys(e.Config)
	if err != nil || rot.From != 1 || rot.To != 2 {
		t.Fatalf("rotate: %+v %v", rot, err)
	}
	if err := e.Server.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := mintCap(t, alice, old, read)
	works("a token minted before the rotation", before.Token, old)
	works("a token minted after the rotation, on a sandbox started before it", after.Token, old)
	fresh := create("fresh")
	works("a token minted after the rotation, on a sandbox started after it", mintCap(t, alice, fresh, read).Token, fresh)

	// Drop key 1, as after a leak: keep only the "key 2" line.
	file := rot.File
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for line := range strings.Lines(string(b)) {
		if !strings.HasPrefix(line, "key 1 ") {
			kept = append(kept, line)
		}
	}
	if err := os.WriteFile(file, []byte(strings.Join(kept, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.Server.Reload(context.Background()); err != nil {
		t.Fatalf("reload without key 1: %v\n%s", err, strings.Join(kept, ""))
	}
	resp := list(before.Token, old)
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Errorf("a token signed under the dropped key still works")
	}
	resp = list(after.Token, old)
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Errorf("a sandbox that holds only the dropped key still accepts tokens")
	}
	works("a sandbox started after the rotation, once the old key is dropped", mintCap(t, alice, fresh, read).Token, fresh)
}
