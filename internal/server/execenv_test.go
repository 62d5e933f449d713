package server_test

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
)

// evilLibrary builds the attacker's shared library: loaded into any program, it prints
// the secret it reads from outside every grant.
func evilLibrary(t *testing.T) []byte {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skipf("no C compiler to build the attacker's library: %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "evil.c")
	code := `#include <stdio.h>
__attribute__((constructor)) static void pwn(void) {
	char b[64] = {0};
	FILE *f = fopen("/workspace/secret.txt", "r");
	if (f) { fread(b, 1, sizeof b - 1, f); fclose(f); }
	fprintf(stderr, "PWNED:%s", b);
}
`
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "evil.so")
	if b, err := exec.Command(cc, "-shared", "-fPIC", "-o", out, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v: %s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wantEnvRefused checks a 403 that names the variable and the rule.
func wantEnvRefused(t *testing.T, resp *http.Response, name, rule string) {
	t.Helper()
	e := servertest.ErrorOf(t, resp, http.StatusForbidden)
	if !strings.Contains(e.Message, name+" is refused") || !strings.Contains(e.Message, "rule "+rule) {
		t.Errorf("env %s: refused with %q, want it to name %s and rule %s", name, e.Message, name, rule)
	}
}

// envRelatives are variables of the reported case's class: each brings code into a
// program that does not name it.
var envRelatives = []struct{ entry, name, rule string }{
	{"LD_PRELOAD=/workspace/src/evil.ts", "LD_PRELOAD", "env.loader"},
	{"LD_LIBRARY_PATH=/workspace/src", "LD_LIBRARY_PATH", "env.loader"},
	{"LD_AUDIT=/workspace/src/evil.ts", "LD_AUDIT", "env.loader"},
	{"GCONV_PATH=/workspace/src", "GCONV_PATH", "env.loader"},
	{"GLIBC_TUNABLES=glibc.rtld.x=1", "GLIBC_TUNABLES", "env.loader"},
	{"BASH_ENV=/workspace/src/a.ts", "BASH_ENV", "env.shell"},
	{"ENV=/workspace/src/a.ts", "ENV", "env.shell"},
	{"PS4=$(cat /workspace/secret.txt)", "PS4", "env.shell"},
	{"SHELLOPTS=xtrace", "SHELLOPTS", "env.shell"},
	{"PROMPT_COMMAND=id", "PROMPT_COMMAND", "env.shell"},
	{"PATH=/workspace/src:/usr/bin:/bin", "PATH", "env.shell"},
	{"PYTHONPATH=/workspace/src", "PYTHONPATH", "env.interpreter"},
	{"PYTHONSTARTUP=/workspace/src/a.ts", "PYTHONSTARTUP", "env.interpreter"},
	{"NODE_OPTIONS=--require=/workspace/src/a.ts", "NODE_OPTIONS", "env.interpreter"},
	{"PERL5OPT=-d", "PERL5OPT", "env.interpreter"},
	{"RUBYOPT=-r/workspace/src/a.ts", "RUBYOPT", "env.interpreter"},
	{"HOME=/workspace/src", "HOME", "env.config"},
	{"XDG_CONFIG_HOME=/workspace/src", "XDG_CONFIG_HOME", "env.config"},
	{"GIT_CONFIG_GLOBAL=/workspace/src/a.ts", "GIT_CONFIG_GLOBAL", "env.config"},
	{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_COUNT", "env.config"},
	{"PAGER=/workspace/src/a.ts", "PAGER", "env.config"},
	{"OPENSSL_CONF=/workspace/src/a.ts", "OPENSSL_CONF", "env.config"},
	{"ANYTHING_ELSE=1", "ANYTHING_ELSE", "env.allowlist"},
	{"TZ=/workspace/src/a.ts", "TZ", "env.value"},
}

// The reported case: a token granting only exec:ls and writes to src/*.ts, and an exec of
// ls with LD_PRELOAD naming the attacker's library, uploaded as a .ts file. It is refused
// with a 403 naming the variable and the rule, audited, and the library never runs; so is
// every relative. The same holds under a sandbox's policy and the server's default one
// (allow_prefixes). The owner's own exec, ungated, keeps today's environment: there the
// library runs, which shows it is real.
func TestExecGrantEnvironment(t *testing.T) {
	lib := evilLibrary(t)
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work"}), http.StatusCreated, &sb)
	base := "/api/v1/sandboxes/" + sb.ID
	execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "printf s3cret > /workspace/secret.txt"}})

	src := mintCap(t, alice, sb.ID, api.CapabilityRequest{Resource: "file:/workspace/src", Actions: []string{"write"}, AllowedExtensions: []string{".ts"}})
	servertest.Decode(t, holder(alice, src.Token).DoToken("PUT", base+"/files/content?path=src/evil.ts", bytes.NewReader(lib)), http.StatusOK, nil)
	ls := holder(alice, mintCap(t, alice, sb.ID, api.CapabilityRequest{Resource: "exec:ls", Actions: []string{"exec"}}).Token)

	for _, r := range envRelatives {
		resp := ls.DoToken("POST", base+"/exec", api.ExecRequest{Argv: []string{"ls"}, Env: []string{"TERM=dumb", r.entry}})
		wantEnvRefused(t, resp, r.name, r.rule)
	}
	var res api.ExecResult
	servertest.Decode(t, ls.DoToken("POST", base+"/exec", api.ExecRequest{Argv: []string{"ls", "/workspace/src"}, Env: []string{"TERM=dumb", "LANG=C.UTF-8"}}), http.StatusOK, &res)
	if string(res.Stdout) != "evil.ts\n" || strings.Contains(string(res.Stderr), "PWNED") {
		t.Errorf("ls under its token with a safe environment: %+v", res)
	}
	var evs api.EventList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?action=sandbox.exec_denied&limit=100", nil), http.StatusOK, &evs)
	if len(evs.Events) != len(envRelatives) {
		t.Errorf("%d sandbox.exec_denied events, want %d", len(evs.Events), len(envRelatives))
	}
	for _, ev := range evs.Events {
		if ev.Detail["env"] == nil || ev.Detail["rule"] == nil || ev.Detail["capability"] == nil || strings.Contains(ev.Detail["env"].(string), "=") {
			t.Errorf("event %+v: want the variable's name, the rule and the token's ID, never the value", ev.Detail)
		}
	}

	// Control: ungated, the owner's exec keeps its environment, and the library is real.
	res = execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"ls", "/workspace/src"}, Env: []string{"LD_PRELOAD=/workspace/src/evil.ts"}})
	if !strings.Contains(string(res.Stderr), "PWNED:s3cret") {
		t.Fatalf("CONTROL FAILED: the owner's own exec with LD_PRELOAD did not run the library: %+v", res)
	}

	// Under the sandbox's own policy, which limits programs.
	servertest.Decode(t, putPolicy(t, alice, sb.ID, "application/yaml", "shell:\n  allow_prefixes: [cat, ls, env, sh]\n  env: [APP_MODE]\n"), http.StatusOK, nil)
	// The command line cannot set them either.
	for _, argv := range [][]string{
		{"env", "LD_PRELOAD=/workspace/src/evil.ts", "ls"},
		{"sh", "-c", "LD_PRELOAD=/workspace/src/evil.ts ls"},
		{"sh", "-c", "export LD_PRELOAD=/workspace/src/evil.ts; ls"},
	} {
		e := servertest.ErrorOf(t, alice.DoToken("POST", base+"/exec", api.ExecRequest{Argv: argv}), http.StatusForbidden)
		if !strings.Contains(e.Message, "LD_PRELOAD= in the command line") || !strings.Contains(e.Message, "rule env.loader") {
			t.Errorf("%q under the policy: %q", argv, e.Message)
		}
	}
	for _, r := range envRelatives {
		resp := alice.DoToken("POST", base+"/exec", api.ExecRequest{Argv: []string{"cat", "/workspace/secret.txt"}, Env: []string{r.entry}})
		wantEnvRefused(t, resp, r.name, r.rule)
	}
	res = execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"cat", "/workspace/secret.txt"}, Env: []string{"APP_MODE=1", "TERM=dumb"}})
	if string(res.Stdout) != "s3cret" {
		t.Errorf("cat under the policy with a listed name: %+v", res)
	}
}

// The server's default policy (allow_prefixes with cat) gates the environment the same
// way.
func TestExecGrantEnvironmentDefaultPolicy(t *testing.T) {
	def := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(def, []byte("shell:\n  allow_prefixes: [cat, sh]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := servertest.Start(t, func(c *server.Config) { c.Policy = def })
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work"}), http.StatusCreated, &sb)
	for _, r := range envRelatives {
		resp := alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/exec", api.ExecRequest{Argv: []string{"cat", "/etc/os-release"}, Env: []string{r.entry}})
		e := servertest.ErrorOf(t, resp, http.StatusForbidden)
		if !strings.Contains(e.Message, "the server's default policy, rule "+r.rule) || !strings.Contains(e.Message, r.name+" is refused") {
			t.Errorf("%s under the default policy: %q", r.name, e.Message)
		}
	}
}

// Under a capability token an exec runs only the programs it grants: what a granted
// program's configuration would start (a git alias, git's fsmonitor hook, a Makefile's
// recipe) cannot execute, nor can a copy of a granted program put elsewhere. The owner's
// own exec runs them all (the control).
func TestExecGrantExecutesOnlyGrantedPrograms(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work"}), http.StatusCreated, &sb)
	base := "/api/v1/sandboxes/" + sb.ID
	setup := `cd /workspace && git init -q . && git config alias.x '!touch /workspace/aliased' &&
printf '#!/bin/sh\ntouch /workspace/monitored\n' > hook.sh && chmod +x hook.sh && git config core.fsmonitor /workspace/hook.sh &&
printf 'all:\n\ttouch /workspace/made\n' > Makefile && cp "$(command -v ls)" /workspace/ls`
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", setup}}); res.ExitCode != 0 {
		t.Fatalf("setup: %+v", res)
	}
	git := holder(alice, mintCap(t, alice, sb.ID, api.CapabilityRequest{Resource: "exec:git", Actions: []string{"exec"}}).Token)
	mk := holder(alice, mintCap(t, alice, sb.ID, api.CapabilityRequest{Resource: "exec:make", Actions: []string{"exec"}}).Token)
	ls := holder(alice, mintCap(t, alice, sb.ID, api.CapabilityRequest{Resource: "exec:ls", Actions: []string{"exec"}}).Token)
	for _, run := range []struct {
		c    *servertest.Client
		argv []string
	}{{git, []string{"git", "x"}}, {git, []string{"git", "status"}}, {mk, []string{"make", "-C", "/workspace"}}} {
		servertest.Decode(t, run.c.DoToken("POST", base+"/exec", api.ExecRequest{Argv: run.argv, Cwd: "/workspace"}), http.StatusOK, nil)
	}
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"ls", "/workspace"}}); strings.Contains(string(res.Stdout), "aliased") ||
		strings.Contains(string(res.Stdout), "monitored") || strings.Contains(string(res.Stdout), "made") {
		t.Errorf("a program no grant names ran under a token:\n%s", res.Stdout)
	}
	var res api.ExecResult
	servertest.Decode(t, git.DoToken("POST", base+"/exec", api.ExecRequest{Argv: []string{"git", "--version"}}), http.StatusOK, &res)
	if !strings.HasPrefix(string(res.Stdout), "git version") {
		t.Errorf("git --version under exec:git: %+v", res)
	}
	wantRefused(t, ls.DoToken("POST", base+"/exec", api.ExecRequest{Argv: []string{"./ls"}, Cwd: "/workspace"}), "the grant of ls is the program the sandbox's PATH finds")

	// Control: the owner's own exec runs the alias, the hook and the recipe.
	execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "cd /workspace && git x; git status >/dev/null; make"}})
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"ls", "/workspace"}}); !strings.Contains(string(res.Stdout), "aliased") ||
		!strings.Contains(string(res.Stdout), "monitored") || !strings.Contains(string(res.Stdout), "made") {
		t.Errorf("CONTROL FAILED: the owner's exec did not run them all:\n%s", res.Stdout)
	}
}

// Where the kernel has no Landlock (runsc: gVisor's kernel), an exec under a token that
// limits programs is refused, saying why, rather than run without the limit; its
// environment is held to the allowlist all the same, and exec:* (every program) runs.
func TestExecGrantWithoutLandlock(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "gvisor", Runtime: "runsc"}), http.StatusCreated, &sb)
	base := "/api/v1/sandboxes/" + sb.ID
	ls := holder(alice, mintCap(t, alice, sb.ID, api.CapabilityRequest{Resource: "exec:ls", Actions: []string{"exec"}}).Token)
	resp := ls.DoToken("POST", base+"/exec", api.ExecRequest{Argv: []string{"ls"}})
	if e := servertest.ErrorOf(t, resp, http.StatusConflict); !strings.Contains(e.Message, "no Landlock") {
		t.Errorf("exec:ls under runsc: %q, want it to say the kernel has no Landlock", e.Message)
	}
	wantEnvRefused(t, ls.DoToken("POST", base+"/exec", api.ExecRequest{Argv: []string{"ls"}, Env: []string{"LD_PRELOAD=/x"}}), "LD_PRELOAD", "env.loader")
	any := holder(alice, mintCap(t, alice, sb.ID, api.CapabilityRequest{Resource: "exec:*", Actions: []string{"exec"}}).Token)
	var res api.ExecResult
	servertest.Decode(t, any.DoToken("POST", base+"/exec", api.ExecRequest{Argv: []string{"echo", "ok"}}), http.StatusOK, &res)
	if string(res.Stdout) != "ok\n" {
		t.Errorf("exec:* under runsc: %+v", res)
	}
}

// Under a token an exec runs where nothing written can be executed or mapped executable:
// a granted program that loads a library by a path (python's ctypes here, an openssl
// engine, a native module) cannot load one from the workspace, which Landlock alone would
// not stop; and it sees no /proc, through which the other view is reachable. The owner's
// own exec loads it (the control).
func TestExecGrantNothingWrittenRuns(t *testing.T) {
	lib := evilLibrary(t)
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work"}), http.StatusCreated, &sb)
	base := "/api/v1/sandboxes/" + sb.ID
	execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "printf s3cret > /workspace/secret.txt; mkdir -p /workspace/src"}})
	servertest.Decode(t, alice.DoToken("PUT", base+"/files/content?path=src/evil.ts", bytes.NewReader(lib)), http.StatusOK, nil)
	load := []string{"python3", "-c", "import ctypes; ctypes.CDLL('/workspace/src/evil.ts')"}

	py := holder(alice, mintCap(t, alice, sb.ID, api.CapabilityRequest{Resource: "exec:python3", Actions: []string{"exec"}}).Token)
	var res api.ExecResult
	servertest.Decode(t, py.DoToken("POST", base+"/exec", api.ExecRequest{Argv: load}), http.StatusOK, &res)
	if strings.Contains(string(res.Stderr), "PWNED") || res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "failed to map segment") {
		t.Errorf("a library from the workspace under exec:python3: %d %s", res.ExitCode, res.Stderr)
	}
	ls := holder(alice, mintCap(t, alice, sb.ID, api.CapabilityRequest{Resource: "exec:ls", Actions: []string{"exec"}}).Token)
	servertest.Decode(t, ls.DoToken("POST", base+"/exec", api.ExecRequest{Argv: []string{"ls", "/proc", "/workspace"}}), http.StatusOK, &res)
	if strings.Contains(string(res.Stdout), "/proc:") || !strings.Contains(string(res.Stderr), "cannot access '/proc'") || !strings.Contains(string(res.Stdout), "secret.txt") {
		t.Errorf("ls under exec:ls: stdout %q stderr %q, want the workspace and no /proc", res.Stdout, res.Stderr)
	}

	// Control: the owner's own exec, ungated, loads it.
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: load}); !strings.Contains(string(res.Stderr), "PWNED:s3cret") {
		t.Fatalf("CONTROL FAILED: the owner's python did not load the library: %+v", res)
	}
}
