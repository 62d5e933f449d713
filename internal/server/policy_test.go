package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
)

// putPolicy sends a policy file as PUT /api/v1/sandboxes/{id}/policy's body.
func putPolicy(t *testing.T, c *servertest.Client, id, contentType, text string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("PUT", c.Base+"/api/v1/sandboxes/"+id+"/policy", strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// execDenied runs req and wants a 403 whose message names rule.
func execDenied(t *testing.T, c *servertest.Client, id string, req api.ExecRequest, rule string) string {
	t.Helper()
	e := servertest.ErrorOf(t, c.DoToken("POST", "/api/v1/sandboxes/"+id+"/exec", req), http.StatusForbidden)
	if e.Code != api.CodePermissionDenied || !strings.Contains(e.Message, "rule "+rule+":") {
		t.Errorf("exec %q: %+v, want permission_denied naming rule %s", req.Argv, e, rule)
	}
	return e.Message
}

// exists says whether path exists in the sandbox, by an exec the policy allows.
func exists(t *testing.T, c *servertest.Client, id, path string) bool {
	t.Helper()
	return execIn(t, c, id, api.ExecRequest{Argv: []string{"test", "-e", path}}).ExitCode == 0
}

const testPolicy = `shell:
  deny:
    - "rm -rf /"
    - "curl * | sh"
    - "touch /workspace/pwned"
files:
  jail: /workspace
  deny_write: [".git/hooks/**", ".env"]
  allowed_extensions: [".txt", ".go"]
  max_file_size: 1KiB
`

// A policy attached to a sandbox is enforced where the action happens: exec (argv, env,
// a shell's stdin, the stream) and the file API, before anything reaches the sandbox. A
// policy that does not load is a 400 naming line and field, and the last good one stays.
func TestPolicyEnforcedOnExecAndFiles(t *testing.T) {
	e := servertest.Start(t, func(c *server.Config) { c.Runner.MaxLimits.Memory = 1 << 30 })
	alice, bob := e.Register(t, "alice"), e.Register(t, "bob")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work", Limits: api.Limits{Memory: "256M"}}), http.StatusCreated, &sb)
	base := "/api/v1/sandboxes/" + sb.ID

	var got api.SandboxPolicy
	servertest.Decode(t, alice.DoToken("GET", base+"/policy", nil), http.StatusOK, &got)
	if got.Source != api.PolicyNone || got.Policy != "" {
		t.Fatalf("before any policy: %+v", got)
	}
	servertest.Decode(t, putPolicy(t, alice, sb.ID, "application/yaml", testPolicy), http.StatusOK, &got)
	if got.Source != api.PolicySandbox || got.Policy != testPolicy || got.UpdatedAt == nil || !strings.Contains(got.Summary, "3 deny patterns") {
		t.Fatalf("attached: %+v", got)
	}

	t.Run("exec", func(t *testing.T) {
		// A denied command never runs: the touch before the pipeline did not happen.
		msg := execDenied(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "touch /workspace/m1; curl -fsSL x | sh"}}, "shell.deny[1]")
		if !strings.Contains(msg, `matches "curl * | sh"`) || !strings.Contains(msg, "the sandbox's policy") {
			t.Errorf("reason: %s", msg)
		}
		execDenied(t, alice, sb.ID, api.ExecRequest{Argv: []string{"rm", "-rf", "/"}}, "shell.deny[0]")
		execDenied(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "touch /workspace/m1; echo $(rm -fr /)"}}, "shell.deny[0]")
		msg = execDenied(t, alice, sb.ID, api.ExecRequest{Argv: []string{"bash", "-c", "touch /workspace/m1; eval \"$X\""}}, "shell")
		if !strings.Contains(msg, "eval runs a string as shell code") {
			t.Errorf("eval: %s", msg)
		}
		execDenied(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "touch /workspace/m1; $(echo rm) -rf /"}}, "shell")
		// What a shell reads from stdin is a script, decided as one.
		msg = execDenied(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh"}, Stdin: []byte("touch /workspace/m1\nrm -rf /\n")}, "shell.deny[0]")
		if !strings.Contains(msg, "standard input") {
			t.Errorf("stdin: %s", msg)
		}
		// A bash function in the environment would replace an allowed command.
		execDenied(t, alice, sb.ID, api.ExecRequest{Argv: []string{"bash", "-c", "ls"}, Env: []string{"BASH_FUNC_ls%%=() { touch /workspace/m1; }"}}, "env.shell")
		if exists(t, alice, sb.ID, "/workspace/m1") {
			t.Fatal("a denied command ran: /workspace/m1 exists")
		}
		res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo ok > /workspace/allowed.txt; cat /workspace/allowed.txt"}})
		if string(res.Stdout) != "ok\n" || res.ExitCode != 0 {
			t.Errorf("an allowed command: %+v", res)
		}
		res = execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh"}, Stdin: []byte("echo from stdin\n")})
		if string(res.Stdout) != "from stdin\n" {
			t.Errorf("an allowed script on stdin: %+v", res)
		}
	})

	t.Run("stream", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cl := paddock.New(e.URL, paddock.WithToken(alice.Token))
		exit := streamExit(ctx, t, cl, sb.ID, api.StreamStart{Argv: []string{"bash"}, TTY: &api.TTYSize{Rows: 24, Cols: 80}})
		if exit.ExitCode != 126 || !strings.Contains(exit.Error, "rule shell.interactive:") {
			t.Errorf("interactive shell: %+v", exit)
		}
		exit = streamExit(ctx, t, cl, sb.ID, api.StreamStart{Argv: []string{"rm", "-rf", "/"}})
		if exit.ExitCode != 126 || !strings.Contains(exit.Error, "rule shell.deny[0]:") {
			t.Errorf("denied stream: %+v", exit)
		}
		if exit := streamExit(ctx, t, cl, sb.ID, api.StreamStart{Argv: []string{"echo", "hi"}}); exit.ExitCode != 0 || exit.Error != "" {
			t.Errorf("allowed stream: %+v", exit)
		}
	})

	t.Run("files", func(t *testing.T) {
		write := func(path string, body io.Reader) *http.Response {
			return alice.DoToken("PUT", base+"/files/content?path="+path, body)
		}
		for _, tc := range []struct{ path, rule string }{
			{".env", "files.deny_write[1]"},
			{"src/.env", "files.deny_write[1]"},
			{".git/hooks/pre-commit", "files.deny_write[0]"},
			{"/workspace/.git/hooks/x.txt", "files.deny_write[0]"},
			{"run.sh", "files.allowed_extensions"},
		} {
			e := servertest.ErrorOf(t, write(tc.path, strings.NewReader("x")), http.StatusForbidden)
			if !strings.Contains(e.Message, "rule "+tc.rule+":") {
				t.Errorf("write %s: %+v, want rule %s", tc.path, e, tc.rule)
			}
			if exists(t, alice, sb.ID, "/workspace/"+strings.TrimPrefix(tc.path, "/workspace/")) {
				t.Errorf("write %s was denied but the file exists", tc.path)
			}
		}
		servertest.Decode(t, write("up/ok.txt", strings.NewReader("small")), http.StatusOK, nil)
		// Over max_file_size by Content-Length, and as a chunked body that grows past it
		// after its first chunk has reached the sandbox.
		big := bytes.Repeat([]byte("x"), 4<<10)
		if e := servertest.ErrorOf(t, write("up/big.txt", bytes.NewReader(big)), http.StatusForbidden); !strings.Contains(e.Message, "rule files.max_file_size:") {
			t.Errorf("oversize: %+v", e)
		}
		growing := &slowReader{chunks: [][]byte{big[:600], big[:600], big[:600]}}
		if e := servertest.ErrorOf(t, write("up/chunked.txt", growing), http.StatusForbidden); !strings.Contains(e.Message, "rule files.max_file_size:") || !strings.Contains(e.Message, "1200 bytes") {
			t.Errorf("chunked oversize: %+v", e)
		}
		var list api.FileList
		servertest.Decode(t, alice.DoToken("GET", base+"/files/list?path=up", nil), http.StatusOK, &list)
		if len(list.Entries) != 1 || list.Entries[0].Name != "ok.txt" {
			t.Errorf("after refused writes, up/ holds %+v; want only ok.txt (no partial file)", list.Entries)
		}
		servertest.Decode(t, write("up/chunked-small.txt", io.MultiReader(strings.NewReader("fits"))), http.StatusOK, nil)
		// Reading is decided too, and allowed inside the jail.
		servertest.Decode(t, alice.DoToken("GET", base+"/files/content?path=up/ok.txt", nil), http.StatusOK, nil)
	})

	t.Run("bad policy keeps the last good one", func(t *testing.T) {
		bad := "shell:\n  deny: [\"rm -rf /\"]\nfiles:\n  jail: /workspace\n  deny_write: [\"[\"]\n"
		e := servertest.ErrorOf(t, putPolicy(t, alice, sb.ID, "text/plain", bad), http.StatusBadRequest)
		if !strings.Contains(e.Message, "policy:5: files.deny_write[0]: invalid glob") {
			t.Errorf("invalid policy: %+v", e)
		}
		e = servertest.ErrorOf(t, putPolicy(t, alice, sb.ID, "application/yaml", "resources: {memory: 2GiB}\n"), http.StatusBadRequest)
		if !strings.Contains(e.Message, "resources.memory: 2GiB is over the server's maximum") {
			t.Errorf("resources over the max: %+v", e)
		}
		servertest.ErrorOf(t, putPolicy(t, alice, sb.ID, "application/json", "{}"), http.StatusUnsupportedMediaType)
		servertest.ErrorOf(t, putPolicy(t, alice, sb.ID, "application/yaml", strings.Repeat("#", 1<<20+1)), http.StatusRequestEntityTooLarge)
		servertest.ErrorOf(t, putPolicy(t, alice, sb.ID, "application/yaml", " \n"), http.StatusBadRequest)
		execDenied(t, alice, sb.ID, api.ExecRequest{Argv: []string{"touch", "/workspace/pwned"}}, "shell.deny[2]")
		var got api.SandboxPolicy
		servertest.Decode(t, alice.DoToken("GET", base+"/policy", nil), http.StatusOK, &got)
		if got.Policy != testPolicy {
			t.Errorf("after refused PUTs the policy is %q", got.Policy)
		}
	})

	t.Run("another user's sandbox", func(t *testing.T) {
		servertest.ErrorOf(t, bob.DoToken("GET", base+"/policy", nil), http.StatusNotFound)
		servertest.ErrorOf(t, putPolicy(t, bob, sb.ID, "application/yaml", "shell: {deny: [ls]}\n"), http.StatusNotFound)
		servertest.ErrorOf(t, bob.DoToken("DELETE", base+"/policy", nil), http.StatusNotFound)
	})

	t.Run("audit", func(t *testing.T) {
		var evs api.EventList
		servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?limit=1000", nil), http.StatusOK, &evs)
		seen := map[string]bool{}
		for _, ev := range evs.Events {
			seen[ev.Action] = true
			if ev.Action == "sandbox.exec_denied" {
				if ev.Detail["rule"] == nil || ev.Detail["policy"] != "sandbox" || ev.Detail["allowed"] != false {
					t.Errorf("denied exec event: %+v", ev.Detail)
				}
				for _, v := range ev.Detail {
					if s, _ := v.(string); strings.Contains(s, "-rf") || strings.Contains(s, "workspace/m1") {
						t.Errorf("an exec event holds the command's arguments: %+v", ev.Detail)
					}
				}
			}
		}
		for _, a := range []string{"sandbox.policy_attach", "sandbox.exec_denied", "sandbox.exec", "sandbox.exec_stream_denied", "sandbox.file_denied"} {
			if !seen[a] {
				t.Errorf("no %s event", a)
			}
		}
	})

	t.Run("resources", func(t *testing.T) {
		withRes := testPolicy + "resources: {memory: 300M, cpus: 0.5, pids: 128, timeout: 1s}\n"
		var got api.SandboxPolicy
		servertest.Decode(t, putPolicy(t, alice, sb.ID, "application/yaml", withRes), http.StatusOK, &got)
		if got.Limits.MemoryBytes != 300<<20 || got.Limits.CPUs != 0.5 || got.Limits.Pids != 128 {
			t.Errorf("limits after attaching resources: %+v", got.Limits)
		}
		// The timeout bounds every exec at once.
		began := time.Now()
		if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sleep", "30"}, TimeoutMS: 20000}); !res.TimedOut || time.Since(began) > 15*time.Second {
			t.Errorf("exec under resources.timeout 1s: %+v after %s", res, time.Since(began))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		began = time.Now()
		if exit := streamExit(ctx, t, paddock.New(e.URL, paddock.WithToken(alice.Token)), sb.ID, api.StreamStart{Argv: []string{"sleep", "30"}}); exit.Signal != 9 || time.Since(began) > 15*time.Second {
			t.Errorf("stream under resources.timeout 1s: %+v after %s", exit, time.Since(began))
		}
		// The rest from the next start: the sandbox restarts with them, policy and all.
		var after api.Sandbox
		servertest.Decode(t, alice.DoToken("POST", base+"/restart", nil), http.StatusOK, &after)
		if after.State != api.StateRunning || after.Limits.MemoryBytes != 300<<20 || after.Limits.Pids != 128 {
			t.Errorf("restarted with %+v (%s: %s)", after.Limits, after.State, after.Error)
		}
		execDenied(t, alice, sb.ID, api.ExecRequest{Argv: []string{"rm", "-rf", "/"}}, "shell.deny[0]")
	})

	// Detached: nothing is decided any more.
	servertest.Decode(t, alice.DoToken("DELETE", base+"/policy", nil), http.StatusNoContent, nil)
	servertest.ErrorOf(t, alice.DoToken("DELETE", base+"/policy", nil), http.StatusNotFound)
	execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"touch", "/workspace/pwned"}})
	if !exists(t, alice, sb.ID, "/workspace/pwned") {
		t.Error("after detaching, an allowed command did not run")
	}
}

// streamExit runs a command over the exec stream and returns how it ended.
func streamExit(ctx context.Context, t *testing.T, cl *paddock.Client, id string, start api.StreamStart) api.StreamExit {
	t.Helper()
	st, err := cl.Sandbox(id).Stream(ctx, start)
	if err != nil {
		t.Fatalf("stream %q: %v", start.Argv, err)
	}
	defer st.Close()
	exit, err := st.Copy(ctx, io.Discard, io.Discard)
	if err != nil {
		t.Fatalf("stream %q: %v", start.Argv, err)
	}
	return exit
}

// Precedence: the sandbox's own policy, else its owner's file, else the server's
// default, else none. The first that exists is the whole policy: they are not merged.
func TestPolicyPrecedence(t *testing.T) {
	dir := t.TempDir()
	def := filepath.Join(dir, "default.yaml")
	writeFile(t, def, "shell: {deny: [\"touch /workspace/d\"]}\nresources: {memory: 192M, pids: 200}\n")
	e := servertest.Start(t, func(c *server.Config) { c.Policy = def })
	users := filepath.Join(e.Config.Runner.UsersDir, "policies")
	writeFile(t, filepath.Join(users, "alice.yaml"), "shell: {deny: [\"touch /workspace/u\"]}\n")
	adminName, adminPassword, err := e.Server.FirstAdmin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	admin := &servertest.Client{Base: e.URL, Token: e.Token(t, adminName, adminPassword)}
	alice, bob, carol := e.Register(t, "alice"), e.Register(t, "Bob"), e.Register(t, "carol")
	create := func(c *servertest.Client) string {
		var sb api.Sandbox
		servertest.Decode(t, c.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Limits: api.Limits{Memory: "128M"}}), http.StatusCreated, &sb)
		return sb.ID
	}
	source := func(c *servertest.Client, id string) string {
		var p api.SandboxPolicy
		servertest.Decode(t, c.DoToken("GET", "/api/v1/sandboxes/"+id+"/policy", nil), http.StatusOK, &p)
		return p.Source
	}
	a, b := create(alice), create(bob)

	// alice: her file, not the default.
	if s := source(alice, a); s != api.PolicyUser {
		t.Errorf("alice's source: %s", s)
	}
	execDenied(t, alice, a, api.ExecRequest{Argv: []string{"touch", "/workspace/u"}}, "shell.deny[0]")
	execIn(t, alice, a, api.ExecRequest{Argv: []string{"touch", "/workspace/d"}})
	// Bob has no file (names are lower-cased): the default.
	if s := source(bob, b); s != api.PolicyDefault {
		t.Errorf("bob's source: %s", s)
	}
	execDenied(t, bob, b, api.ExecRequest{Argv: []string{"touch", "/workspace/d"}}, "shell.deny[0]")
	// The default's resources are the limits of bob's new sandboxes: what a request does
	// not give, and a ceiling on what it does.
	var sb api.Sandbox
	servertest.Decode(t, bob.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{}), http.StatusCreated, &sb)
	if sb.Limits.MemoryBytes != 192<<20 || sb.Limits.Pids != 200 {
		t.Errorf("bob's sandbox under the default policy: %+v", sb.Limits)
	}
	if e := servertest.ErrorOf(t, bob.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Limits: api.Limits{Memory: "256M"}}), http.StatusBadRequest); !strings.Contains(e.Message, "limits.memory: 256MiB is over the policy's resources.memory of 192MiB") {
		t.Errorf("a request over the policy's resources: %+v", e)
	}
	// The sandbox's own policy wins over both. It replaces the operator's, so only an
	// admin may attach or detach it then: alice (or an agent with her token) cannot lift
	// her rules with an empty policy.
	e1 := servertest.ErrorOf(t, putPolicy(t, alice, a, "application/yaml", "network: {default: deny}\n"), http.StatusForbidden)
	if !strings.Contains(e1.Message, "only an admin may attach or detach") {
		t.Errorf("alice replacing her operator's policy: %+v", e1)
	}
	servertest.Decode(t, putPolicy(t, admin, a, "application/yaml", "shell: {deny: [\"touch /workspace/s\"]}\n"), http.StatusOK, nil)
	execDenied(t, alice, a, api.ExecRequest{Argv: []string{"touch", "/workspace/s"}}, "shell.deny[0]")
	execIn(t, alice, a, api.ExecRequest{Argv: []string{"touch", "/workspace/u"}})
	servertest.ErrorOf(t, alice.DoToken("DELETE", "/api/v1/sandboxes/"+a+"/policy", nil), http.StatusForbidden)
	req, _ := http.NewRequest("DELETE", e.URL+"/api/v1/sandboxes/"+a+"/policy", nil)
	req.Header.Set("Authorization", "Bearer "+admin.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	servertest.Decode(t, resp, http.StatusNoContent, nil)
	if s := source(alice, a); s != api.PolicyUser {
		t.Errorf("after the admin detached: %s", s)
	}

	// A user file that stops loading keeps its last good version in force.
	writeFile(t, filepath.Join(users, "alice.yaml"), "shell: {deny: [\"touch /workspace/u\"]}\nbogus: 1\n")
	execDenied(t, alice, a, api.ExecRequest{Argv: []string{"touch", "/workspace/u"}}, "shell.deny[0]")
	// One that never loaded refuses everything until it is fixed, saying where.
	c := create(carol)
	writeFile(t, filepath.Join(users, "carol.yaml"), "shell: {deny: [\"rm -rf /\"]}\nbogus: 1\n")
	ce := servertest.ErrorOf(t, carol.DoToken("POST", "/api/v1/sandboxes/"+c+"/exec", api.ExecRequest{Argv: []string{"true"}}), http.StatusConflict)
	if !strings.Contains(ce.Message, "policy of user carol:2: bogus: unknown field") || strings.Contains(ce.Message, users) {
		t.Errorf("broken user policy: %+v", ce)
	}
	servertest.ErrorOf(t, carol.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{}), http.StatusConflict)
	writeFile(t, filepath.Join(users, "carol.yaml"), "shell: {deny: [\"rm -rf /\"]}\n")
	execIn(t, carol, c, api.ExecRequest{Argv: []string{"true"}})
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	// A new modification time even within the file system's granularity.
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Duration(len(text)) * time.Second)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
}

// The default policy is loaded at start: a mistake stops it with the line and the field.
func TestDefaultPolicyCheckedAtStart(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "p.yaml")
	writeFile(t, pol, "shell:\n  deny: [\"rm -rf /\", 3]\n")
	cfgFile := filepath.Join(dir, "paddock.yaml")
	writeFile(t, cfgFile, "policy: "+pol+"\n")
	_, err := server.LoadConfig(cfgFile, dir, "")
	if err == nil || !strings.Contains(err.Error(), "policy: "+pol+":2: shell.deny[1]: want a string") {
		t.Errorf("LoadConfig with a bad policy: %v", err)
	}
	writeFile(t, pol, "resources: {pids: 100000}\n")
	writeFile(t, cfgFile, "policy: "+pol+"\nmax_limits: {pids: 1000}\n")
	if _, err := server.LoadConfig(cfgFile, dir, ""); err == nil || !strings.Contains(err.Error(), "resources.pids: 100000 is over the server's maximum") {
		t.Errorf("LoadConfig with a policy over max_limits: %v", err)
	}
	writeFile(t, pol, "shell: {deny: [\"rm -rf /\"]}\n")
	if _, err := server.LoadConfig(cfgFile, dir, ""); err != nil {
		t.Errorf("LoadConfig with a good policy: %v", err)
	}
}

// slowReader yields its chunks one Read at a time, pausing before each after the first, so
// that a chunked body reaches the server piece by piece.
type slowReader struct {
	chunks [][]byte
	n      int
}

func (r *slowReader) Read(p []byte) (int, error) {
	if r.n >= len(r.chunks) {
		return 0, io.EOF
	}
	if r.n > 0 {
		time.Sleep(200 * time.Millisecond)
	}
	r.n++
	return copy(p, r.chunks[r.n-1]), nil
}

// File rules hold where a path really leads: a symlink planted in the workspace from an
// allowed directory into a protected one gets no write, mkdir, move or removal past
// deny_write. The control plane allows the path as named; the sandbox's agent, given the
// policy with the request, refuses it where it leads.
func TestPolicyFileRulesFollowSymlinks(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "links"}), http.StatusCreated, &sb)
	execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "mkdir -p /workspace/secret /workspace/src && echo keep > /workspace/secret/keep && ln -s ../secret /workspace/src/link"}})
	servertest.Decode(t, putPolicy(t, alice, sb.ID, "application/yaml", "files:\n  jail: /workspace\n  deny_write: [\"secret/**\"]\n"), http.StatusOK, nil)
	base := "/api/v1/sandboxes/" + sb.ID + "/files/"
	const why = "where the path leads (/workspace/secret/"
	for _, tc := range []struct {
		name string
		resp *http.Response
	}{
		{"write", alice.DoToken("PUT", base+"content?path=src/link/planted", strings.NewReader("x"))},
		{"mkdir", alice.DoToken("POST", base+"mkdir", api.FileMkdirRequest{Path: "src/link/d"})},
		{"move", alice.DoToken("POST", base+"move", api.FileMoveRequest{From: "src/link/keep", To: "src/keep"})},
		{"remove", alice.DoToken("DELETE", base+"content?path=src/link/keep", nil)},
	} {
		e := servertest.ErrorOf(t, tc.resp, http.StatusForbidden)
		if !strings.Contains(e.Message, why) || !strings.Contains(e.Message, "files.deny_write[0]") {
			t.Errorf("%s through the link: %q, want the agent's refusal naming where it leads and the rule", tc.name, e.Message)
		}
	}
	res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"ls", "/workspace/secret", "/workspace/src"}})
	if got := string(res.Stdout); got != "/workspace/secret:\nkeep\n\n/workspace/src:\nlink\n" {
		t.Errorf("after the refusals the workspace holds:\n%s", got)
	}
	// The same write to the allowed directory itself goes through.
	servertest.Decode(t, alice.DoToken("PUT", base+"content?path=src/ok", strings.NewReader("x")), http.StatusOK, nil)
	// Each of the agent's refusals is an event, as the control plane's are.
	var evs api.EventList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?action=sandbox.file_denied&limit=100", nil), http.StatusOK, &evs)
	ops := map[string]bool{}
	for _, ev := range evs.Events {
		if ev.Detail["by"] == "agent" && strings.Contains(fmt.Sprint(ev.Detail["error"]), "files.deny_write[0]") {
			ops[fmt.Sprint(ev.Detail["op"])] = true
		}
	}
	if len(ops) != 4 {
		t.Errorf("the agent's refusals recorded for %v, want write, mkdir, move and remove", ops)
	}
}
