package server_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
)

func mkdirIn(c *servertest.Client, id string, req api.FileMkdirRequest) *http.Response {
	return c.DoToken("POST", "/api/v1/sandboxes/"+id+"/files/mkdir", req)
}

func moveIn(c *servertest.Client, id string, req api.FileMoveRequest) *http.Response {
	return c.DoToken("POST", "/api/v1/sandboxes/"+id+"/files/move", req)
}

func removeIn(c *servertest.Client, id, path string, recursive bool) *http.Response {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "true")
	}
	return c.DoToken("DELETE", "/api/v1/sandboxes/"+id+"/files/content?"+q.Encode(), nil)
}

// shIn runs a shell script in the sandbox and returns its standard output.
func shIn(t *testing.T, c *servertest.Client, id, script string) string {
	t.Helper()
	res := execIn(t, c, id, api.ExecRequest{Argv: []string{"sh", "-c", script}})
	if res.ExitCode != 0 {
		t.Fatalf("sh -c %q: exit %d: %s", script, res.ExitCode, res.Stderr)
	}
	return string(res.Stdout)
}

// wantError checks an error response's status and that its message says what.
func wantError(t *testing.T, resp *http.Response, status int, what string) {
	t.Helper()
	e := servertest.ErrorOf(t, resp, status)
	if !strings.Contains(e.Message, what) {
		t.Errorf("%s %s: %d %q, want it to say %q", resp.Request.Method, resp.Request.URL, status, e.Message, what)
	}
}

// The file API makes directories, moves and removes, as the sandbox then sees (ls through
// exec); bad input is a 400 naming the field, never a 500; a missing file is 404, an
// existing one in the way 409; another user's sandbox is 404; every change is an event.
func TestFileOps(t *testing.T) {
	e := servertest.Start(t)
	alice, bob := e.Register(t, "alice"), e.Register(t, "bob")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work"}), http.StatusCreated, &sb)
	id := sb.ID

	t.Run("mkdir", func(t *testing.T) {
		var fi api.FileInfo
		servertest.Decode(t, mkdirIn(alice, id, api.FileMkdirRequest{Path: "src/pkg", Parents: true, Mode: "1775"}), http.StatusOK, &fi)
		if fi.Path != "src/pkg" || fi.Name != "pkg" || !fi.IsDir || fi.Mode != "1775" {
			t.Errorf("mkdir -p src/pkg 1775: %+v", fi)
		}
		if out := shIn(t, alice, id, "ls /workspace/src; stat -c %a /workspace/src/pkg"); out != "pkg\n1775\n" {
			t.Errorf("after mkdir, ls and stat say %q", out)
		}
		servertest.Decode(t, mkdirIn(alice, id, api.FileMkdirRequest{Path: "/workspace/top"}), http.StatusOK, &fi)
		if fi.Path != "top" || fi.Mode != "0755" {
			t.Errorf("mkdir /workspace/top: %+v", fi)
		}
		wantError(t, mkdirIn(alice, id, api.FileMkdirRequest{Path: "src/pkg"}), http.StatusConflict, "already exists")
		servertest.Decode(t, mkdirIn(alice, id, api.FileMkdirRequest{Path: "src/pkg", Parents: true}), http.StatusOK, &fi)
		if fi.Mode != "1775" {
			t.Errorf("mkdir -p of an existing directory changed its mode: %+v", fi)
		}
		wantError(t, mkdirIn(alice, id, api.FileMkdirRequest{Path: "setgid", Mode: "2775"}), http.StatusBadRequest, "setuid and setgid are refused")
		wantError(t, mkdirIn(alice, id, api.FileMkdirRequest{Path: "no/such"}), http.StatusNotFound, "not found")
		shIn(t, alice, id, "echo x > /workspace/file")
		wantError(t, mkdirIn(alice, id, api.FileMkdirRequest{Path: "file", Parents: true}), http.StatusConflict, "not a directory")
	})

	t.Run("move", func(t *testing.T) {
		shIn(t, alice, id, "echo one > /workspace/src/pkg/a.txt; echo two > /workspace/src/c.txt")
		var fi api.FileInfo
		servertest.Decode(t, moveIn(alice, id, api.FileMoveRequest{From: "src/pkg/a.txt", To: "/workspace/src/b.txt"}), http.StatusOK, &fi)
		if fi.Path != "src/b.txt" || fi.Name != "b.txt" || fi.IsDir || fi.Size != 4 {
			t.Errorf("move a.txt to b.txt: %+v", fi)
		}
		if out := shIn(t, alice, id, "ls /workspace/src /workspace/src/pkg"); out != "/workspace/src:\nb.txt\nc.txt\npkg\n\n/workspace/src/pkg:\n" {
			t.Errorf("after the move, ls says %q", out)
		}
		wantError(t, moveIn(alice, id, api.FileMoveRequest{From: "src/b.txt", To: "src/c.txt"}), http.StatusConflict, "already exists")
		servertest.Decode(t, moveIn(alice, id, api.FileMoveRequest{From: "src/b.txt", To: "src/c.txt", Overwrite: true}), http.StatusOK, &fi)
		if out := shIn(t, alice, id, "cat /workspace/src/c.txt; ls /workspace/src"); out != "one\nc.txt\npkg\n" {
			t.Errorf("after the move with overwrite: %q", out)
		}
		// A directory moves with what it holds.
		servertest.Decode(t, moveIn(alice, id, api.FileMoveRequest{From: "src", To: "lib"}), http.StatusOK, &fi)
		if !fi.IsDir || fi.Path != "lib" {
			t.Errorf("move src to lib: %+v", fi)
		}
		if out := shIn(t, alice, id, "ls /workspace/lib; test ! -e /workspace/src && echo gone"); out != "c.txt\npkg\ngone\n" {
			t.Errorf("after moving the directory: %q", out)
		}
		wantError(t, moveIn(alice, id, api.FileMoveRequest{From: "missing", To: "x"}), http.StatusNotFound, "not found")
		wantError(t, moveIn(alice, id, api.FileMoveRequest{From: "lib/c.txt", To: "no/such/c.txt"}), http.StatusNotFound, "not found")
	})

	t.Run("remove", func(t *testing.T) {
		servertest.Decode(t, removeIn(alice, id, "lib/c.txt", false), http.StatusNoContent, nil)
		if out := shIn(t, alice, id, "ls /workspace/lib"); out != "pkg\n" {
			t.Errorf("after removing lib/c.txt, ls says %q", out)
		}
		wantError(t, removeIn(alice, id, "lib/c.txt", false), http.StatusNotFound, "not found")
		wantError(t, removeIn(alice, id, "lib/c.txt", true), http.StatusNotFound, "not found")
		shIn(t, alice, id, "echo x > /workspace/lib/pkg/f")
		wantError(t, removeIn(alice, id, "lib", false), http.StatusConflict, "directory not empty")
		servertest.Decode(t, removeIn(alice, id, "/workspace/lib", true), http.StatusNoContent, nil)
		servertest.Decode(t, removeIn(alice, id, "top", false), http.StatusNoContent, nil)
		if out := shIn(t, alice, id, "ls -A /workspace"); out != "file\n" {
			t.Errorf("after removing lib and top, the workspace holds %q", out)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		shIn(t, alice, id, "mkdir -p /workspace/d && echo x > /workspace/x && echo y > /workspace/y")
		post := func(route, body string) *http.Response {
			return alice.DoToken("POST", "/api/v1/sandboxes/"+id+"/files/"+route, strings.NewReader(body))
		}
		for _, tc := range []struct {
			route, body string
			status      int
			says        string
		}{
			{"mkdir", `{}`, 400, "path: give a path"},
			{"mkdir", `{"path":""}`, 400, "path: give a path"},
			{"mkdir", `{"path":"../x"}`, 400, `path "../x" leaves the workspace`},
			{"mkdir", `{"path":"/workspace/../../etc/x"}`, 400, "leaves the workspace"},
			{"mkdir", `{"path":"n","mode":"999"}`, 400, `mode "999": want an octal permission`},
			{"mkdir", `{"path":"n","mode":"0"}`, 400, `mode "0"`},
			{"mkdir", `{"path":"n","mode":"4755"}`, 400, `mode "4755"`},
			{"mkdir", `{"path":"n","mode":"rwx"}`, 400, `mode "rwx"`},
			{"mkdir", `{"path":"n","mdoe":"755"}`, 400, `unknown field "mdoe"`},
			{"mkdir", `{"path":"n","parents":"yes"}`, 400, "parents"},
			{"mkdir", ``, 400, "empty"},
			{"move", `{"to":"z"}`, 400, "from: give a path"},
			{"move", `{"from":"x"}`, 400, "to: give a path"},
			{"move", `{"from":"x","to":"/workspace/x"}`, 400, "a move needs two different paths"},
			{"move", `{"from":"d/../x","to":"/x"}`, 400, "a move needs two different paths"},
			{"move", `{"from":"../../etc/passwd","to":"p"}`, 400, "leaves the workspace"},
			{"move", `{"from":"x","to":"../x"}`, 400, "leaves the workspace"},
			{"move", `{"from":"/workspace","to":"w"}`, 400, "the workspace itself"},
			{"move", `{"from":"d","to":"d/e"}`, 400, `to "d/e" is inside from "d": nothing can be moved into itself`},
			{"move", `{"from":"/workspace/d","to":"d/e/f"}`, 400, "nothing can be moved into itself"},
			{"move", `{"from":"x","to":"d","overwrite":true}`, 400, "is a directory"},
		} {
			wantError(t, post(tc.route, tc.body), tc.status, tc.says)
		}
		content := "/api/v1/sandboxes/" + id + "/files/content"
		wantError(t, alice.DoToken("DELETE", content, nil), 400, "query parameter path")
		wantError(t, alice.DoToken("DELETE", content+"?path=x&recursive=maybe", nil), 400, `recursive="maybe": want true or false`)
		wantError(t, alice.DoToken("DELETE", content+"?path=../../etc/passwd", nil), 400, "leaves the workspace")
		wantError(t, alice.DoToken("DELETE", content+"?path=/workspace&recursive=true", nil), 400, "the workspace itself")
		// Nothing was changed.
		if out := shIn(t, alice, id, "ls -A /workspace; cat /workspace/x"); out != "d\nfile\nx\ny\nx\n" {
			t.Errorf("after refused requests, the workspace holds %q", out)
		}
	})

	t.Run("another user's sandbox", func(t *testing.T) {
		for _, resp := range []*http.Response{
			mkdirIn(bob, id, api.FileMkdirRequest{Path: "bob"}),
			moveIn(bob, id, api.FileMoveRequest{From: "x", To: "bob"}),
			removeIn(bob, id, "x", false),
			mkdirIn(bob, "sb-aaaaaaaaaa", api.FileMkdirRequest{Path: "bob"}),
		} {
			e := servertest.ErrorOf(t, resp, http.StatusNotFound)
			if strings.Contains(e.Message, "alice") {
				t.Errorf("bob's error names alice: %s", e.Message)
			}
		}
		if out := shIn(t, alice, id, "ls -A /workspace"); out != "d\nfile\nx\ny\n" {
			t.Errorf("after bob's attempts, the workspace holds %q", out)
		}
	})

	t.Run("audit", func(t *testing.T) {
		var evs api.EventList
		servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?limit=1000", nil), http.StatusOK, &evs)
		n := map[string]int{}
		for _, ev := range evs.Events {
			n[ev.Action]++
			switch ev.Action {
			case "sandbox.file_mkdir", "sandbox.file_remove":
				if ev.Detail["sandbox"] != id || ev.Detail["path"] == nil {
					t.Errorf("%s: %+v", ev.Action, ev.Detail)
				}
			case "sandbox.file_move":
				if ev.Detail["sandbox"] != id || ev.Detail["from"] == nil || ev.Detail["to"] == nil {
					t.Errorf("%s: %+v", ev.Action, ev.Detail)
				}
			}
		}
		// One event per change made (mkdir 3: src/pkg, top, src/pkg again with parents;
		// move 3; remove 3), with the paths relative to the workspace.
		for _, want := range []map[string]any{
			{"action": "sandbox.file_mkdir", "path": "top"},
			{"action": "sandbox.file_move", "from": "src/pkg/a.txt", "to": "src/b.txt"},
			{"action": "sandbox.file_remove", "path": "lib", "recursive": true},
		} {
			found := false
			for _, ev := range evs.Events {
				match := ev.Action == want["action"]
				for k, v := range want {
					match = match && (k == "action" || ev.Detail[k] == v)
				}
				found = found || match
			}
			if !found {
				t.Errorf("no event %v", want)
			}
		}
		for action, want := range map[string]int{"sandbox.file_mkdir": 3, "sandbox.file_move": 3, "sandbox.file_remove": 3} {
			if n[action] != want {
				t.Errorf("%d %s events, want %d", n[action], action, want)
			}
		}
	})
}

// The policy in force decides mkdir, move and remove before they reach the sandbox: a
// path under files.deny_write is refused with a 403 naming the rule, for a move on
// either side; allowed_extensions applies to a file a move creates, not to a directory.
func TestFileOpsUnderPolicy(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work"}), http.StatusCreated, &sb)
	id := sb.ID
	shIn(t, alice, id, "cd /workspace && echo s > .env && echo a > a.txt && mkdir -p lib tree/hooks && echo x > lib/x.txt && echo h > tree/hooks/pre-commit")
	const pol = `files:
  jail: /workspace
  deny_write: [".git/hooks/**", ".env"]
  allowed_extensions: [".txt"]
`
	servertest.Decode(t, putPolicy(t, alice, id, "application/yaml", pol), http.StatusOK, nil)
	denied := func(resp *http.Response, rule string) {
		t.Helper()
		wantError(t, resp, http.StatusForbidden, "rule "+rule+":")
	}

	denied(mkdirIn(alice, id, api.FileMkdirRequest{Path: ".git/hooks", Parents: true}), "files.deny_write[0]")
	denied(mkdirIn(alice, id, api.FileMkdirRequest{Path: "lib/.env"}), "files.deny_write[1]")
	denied(moveIn(alice, id, api.FileMoveRequest{From: "a.txt", To: "lib/.env"}), "files.deny_write[1]")
	denied(moveIn(alice, id, api.FileMoveRequest{From: ".env", To: "b.txt"}), "files.deny_write[1]")
	denied(moveIn(alice, id, api.FileMoveRequest{From: "a.txt", To: "run.sh"}), "files.allowed_extensions")
	// A directory moved to .git would bring hooks/pre-commit under .git/hooks/**.
	denied(moveIn(alice, id, api.FileMoveRequest{From: "tree", To: ".git"}), "files.deny_write[0]")
	denied(removeIn(alice, id, ".env", false), "files.deny_write[1]")
	denied(removeIn(alice, id, "/workspace/lib/.env", false), "files.deny_write[1]")
	if out := shIn(t, alice, id, "cd /workspace && ls -A . lib"); out != ".:\n.env\na.txt\nlib\ntree\n\nlib:\nx.txt\n" {
		t.Errorf("after refused operations, the workspace holds %q", out)
	}

	// Allowed: a directory (no extension needed), a move of a .txt file, a removal.
	servertest.Decode(t, mkdirIn(alice, id, api.FileMkdirRequest{Path: ".git"}), http.StatusOK, nil)
	denied(removeIn(alice, id, ".git", true), "files.deny_write[0]") // it would remove what .git/hooks/** protects
	servertest.Decode(t, moveIn(alice, id, api.FileMoveRequest{From: "lib", To: "pkg"}), http.StatusOK, nil)
	servertest.Decode(t, moveIn(alice, id, api.FileMoveRequest{From: "a.txt", To: "pkg/a.txt"}), http.StatusOK, nil)
	servertest.Decode(t, removeIn(alice, id, "pkg/x.txt", false), http.StatusNoContent, nil)
	if out := shIn(t, alice, id, "cd /workspace && ls -A . pkg"); out != ".:\n.env\n.git\npkg\ntree\n\npkg:\na.txt\n" {
		t.Errorf("after allowed operations, the workspace holds %q", out)
	}

	var evs api.EventList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?action=sandbox.file_denied&limit=100", nil), http.StatusOK, &evs)
	if len(evs.Events) != 9 {
		t.Errorf("%d sandbox.file_denied events, want 9", len(evs.Events))
	}
}

// A capability token bounds mkdir, move and remove to what it grants: write makes
// directories, delete removes, a move needs delete on its source and write on its
// destination; the agent checks again where a path really leads, so a symlink from the
// granted directory into another gains nothing.
func TestFileOpsUnderCapability(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work"}), http.StatusCreated, &sb)
	id := sb.ID
	shIn(t, alice, id, "cd /workspace && mkdir -p src secret && echo f > src/f.txt && echo s > secret/x && ln -s ../secret src/link")

	w := holder(alice, mintCap(t, alice, id, api.CapabilityRequest{Resource: "file:/workspace/src", Actions: []string{"write"}}).Token)
	servertest.Decode(t, mkdirIn(w, id, api.FileMkdirRequest{Path: "src/new/deep", Parents: true}), http.StatusOK, nil)
	wantRefused(t, mkdirIn(w, id, api.FileMkdirRequest{Path: "other"}), "outside file:/workspace/src")
	wantRefused(t, removeIn(w, id, "src/new/deep", false), "action delete not allowed")
	wantRefused(t, moveIn(w, id, api.FileMoveRequest{From: "src/f.txt", To: "f.txt"}), "action delete not allowed")
	wantRefused(t, moveIn(w, id, api.FileMoveRequest{From: "src/f.txt", To: "src/g.txt"}), "action delete not allowed")
	// The agent refuses a directory made through the symlink, where it would really be.
	wantRefused(t, mkdirIn(w, id, api.FileMkdirRequest{Path: "src/link/made"}), "resource file:/workspace/secret/made outside file:/workspace/src")

	wd := holder(alice, mintCap(t, alice, id, api.CapabilityRequest{Resource: "file:/workspace/src", Actions: []string{"write", "delete"}}).Token)
	wantRefused(t, moveIn(wd, id, api.FileMoveRequest{From: "src/f.txt", To: "f.txt"}), "resource file:/workspace/f.txt outside file:/workspace/src")
	wantRefused(t, moveIn(wd, id, api.FileMoveRequest{From: "secret/x", To: "src/x"}), "resource file:/workspace/secret/x outside file:/workspace/src")
	servertest.Decode(t, moveIn(wd, id, api.FileMoveRequest{From: "src/f.txt", To: "src/new/g.txt"}), http.StatusOK, nil)
	servertest.Decode(t, removeIn(wd, id, "src/new/deep", false), http.StatusNoContent, nil)
	wantRefused(t, removeIn(wd, id, "secret/x", false), "outside file:/workspace/src")
	// Through the symlink the server sees src/link/x; the agent sees secret/x, and refuses.
	wantRefused(t, removeIn(wd, id, "src/link/x", false), "resource file:/workspace/secret/x outside file:/workspace/src")
	wantRefused(t, moveIn(wd, id, api.FileMoveRequest{From: "src/link/x", To: "src/x"}), "resource file:/workspace/secret/x outside file:/workspace/src")
	if out := shIn(t, alice, id, "cd /workspace && ls -A src src/new secret"); out != "secret:\nx\n\nsrc:\nlink\nnew\n\nsrc/new:\ng.txt\n" {
		t.Errorf("after the token's requests, the workspace holds %q", out)
	}
	// The symlink itself is in src: removing it removes the link, never its target.
	servertest.Decode(t, removeIn(wd, id, "src/link", false), http.StatusNoContent, nil)
	if out := shIn(t, alice, id, "cd /workspace && ls -A src; cat secret/x"); out != "new\ns\n" {
		t.Errorf("after removing the symlink: %q", out)
	}

	// Every refusal is audited, with the token's ID, never the token.
	var evs api.EventList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?action=sandbox.capability_denied&limit=100", nil), http.StatusOK, &evs)
	if len(evs.Events) < 6 {
		t.Errorf("%d sandbox.capability_denied events, want the server's 6 refusals at least", len(evs.Events))
	}
}
