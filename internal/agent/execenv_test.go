package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/agent/session"
	"github.com/paddockhq/paddock/internal/capability"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// The agent holds a gated exec's environment to the allowlist itself, whatever the
// control plane let through: under a capability token the safe set only, under a
// policy's gate the names it lists too. An ungated exec keeps any environment.
func TestGatedExecEnvironment(t *testing.T) {
	a := newCapAgent(t)
	ls := a.grant(t, "exec:ls", capability.Exec)
	for _, tc := range []struct {
		name string
		req  *pb.ExecuteRequest
		want []string
	}{
		{"token, loader", &pb.ExecuteRequest{Argv: []string{"ls"}, Capability: ls, Env: []string{"LD_PRELOAD=/workspace/src/evil.ts"}}, []string{"env[0]: LD_PRELOAD", "rule env.loader"}},
		{"token, shell", &pb.ExecuteRequest{Argv: []string{"ls"}, Capability: ls, Env: []string{"TERM=dumb", "BASH_ENV=/workspace/x"}}, []string{"env[1]: BASH_ENV", "rule env.shell"}},
		{"token, listed by a policy too", &pb.ExecuteRequest{Argv: []string{"ls"}, Capability: ls, Env: []string{"APP_MODE=1"}, Gate: &pb.ExecGate{Env: []string{"APP_MODE"}}}, []string{"APP_MODE", "rule env.allowlist"}},
		{"gate, interpreter", &pb.ExecuteRequest{Argv: []string{"ls"}, Env: []string{"PYTHONPATH=/workspace"}, Gate: &pb.ExecGate{}}, []string{"PYTHONPATH", "rule env.interpreter"}},
		{"gate, config", &pb.ExecuteRequest{Argv: []string{"ls"}, Env: []string{"HOME=/workspace"}, Gate: &pb.ExecGate{Env: []string{"HOME"}}}, []string{"HOME", "rule env.config"}},
		{"gate, not listed", &pb.ExecuteRequest{Argv: []string{"ls"}, Env: []string{"OTHER=1"}, Gate: &pb.ExecGate{Env: []string{"APP_MODE"}}}, []string{"OTHER", "rule env.allowlist"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := a.proc.Execute(ctx(t), tc.req)
			wantRefused(t, err, tc.want...)
			s, err := a.proc.Start(ctx(t), &pb.StartRequest{Argv: tc.req.Argv, Env: tc.req.Env, Capability: tc.req.Capability, Gate: tc.req.Gate})
			mustDo(t, err)
			_, err = s.Recv()
			wantRefused(t, err, tc.want...)
		})
	}
	resp, err := a.proc.Execute(ctx(t), &pb.ExecuteRequest{Argv: []string{"sh", "-c", "echo $APP_MODE"}, Env: []string{"APP_MODE=test", "TERM=dumb"}, AddEnv: true, Gate: &pb.ExecGate{Env: []string{"APP_MODE"}}})
	if err != nil || string(resp.Stdout) != "test\n" {
		t.Fatalf("a listed name under a gate: %v %v", resp, err)
	}
	resp, err = a.proc.Execute(ctx(t), &pb.ExecuteRequest{Argv: []string{"sh", "-c", "echo $HOME"}, Env: []string{"HOME=/elsewhere"}, AddEnv: true})
	if err != nil || string(resp.Stdout) != "/elsewhere\n" {
		t.Fatalf("an ungated exec's environment: %v %v", resp, err)
	}
}

// Under a capability token a command may execute only the programs its command line
// names (as PATH finds them) and the interpreters they need: a helper that a granted
// program's configuration names (git's aliases, fsmonitor; make's recipes) cannot run,
// and neither can a program of the granted name elsewhere. exec:* lifts the limit.
func TestGatedExecLimitsExecution(t *testing.T) {
	if why := session.CanRestrictExec(); why != "" {
		t.Skip(why)
	}
	for _, p := range []string{"git", "make"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is not installed: %v", p, err)
		}
	}
	a := newCapAgent(t)
	git := a.grant(t, "exec:git", capability.Exec)
	mk := a.grant(t, "exec:make", capability.Exec)
	any := a.grant(t, "exec:*", capability.Exec)
	run := func(tok string, argv ...string) *pb.ExecuteResponse {
		t.Helper()
		resp, err := a.proc.Execute(ctx(t), &pb.ExecuteRequest{Argv: argv, Capability: tok})
		mustDo(t, err)
		return resp
	}
	// The set-up runs through the agent, ungated: a child this test forked itself could be
	// collected by the agent's reaper (wait4(-1) in the same process) before its own Wait.
	setup := func(argv ...string) {
		t.Helper()
		resp, err := a.proc.Execute(ctx(t), &pb.ExecuteRequest{Argv: argv})
		mustDo(t, err)
		if resp.Status.GetExitCode() != 0 {
			t.Fatalf("%q: %s", argv, resp.Stderr)
		}
	}
	setup("git", "init", "-q", a.ws)
	setup("git", "-C", a.ws, "config", "alias.x", "!touch aliased")
	mustDo(t, os.WriteFile(filepath.Join(a.ws, "hook.sh"), []byte("#!/bin/sh\ntouch "+filepath.Join(a.ws, "monitored")+"\n"), 0o755))
	setup("git", "-C", a.ws, "config", "core.fsmonitor", filepath.Join(a.ws, "hook.sh"))
	mustDo(t, os.WriteFile(filepath.Join(a.ws, "Makefile"), []byte("all:\n\ttouch made\n"), 0o644))

	if resp := run(git, "git", "status", "--short"); resp.Status.GetExitCode() != 0 && !strings.Contains(string(resp.Stderr), "monitor") {
		t.Logf("git status under exec:git: %s", resp.Stderr)
	}
	run(git, "git", "x")
	run(mk, "make")
	for _, f := range []string{"aliased", "monitored", "made"} {
		if a.exists(f) {
			t.Errorf("%s: a program the grant does not name ran", f)
		}
	}
	if resp := run(git, "git", "--version"); !strings.HasPrefix(string(resp.Stdout), "git version") {
		t.Errorf("git --version under exec:git: %+v", resp)
	}

	// The same file elsewhere is not the program granted.
	ls, err := exec.LookPath("ls")
	mustDo(t, err)
	data, err := os.ReadFile(ls)
	mustDo(t, err)
	mustDo(t, os.WriteFile(filepath.Join(a.ws, "ls"), data, 0o755))
	_, err = a.proc.Execute(ctx(t), &pb.ExecuteRequest{Argv: []string{"./ls"}, Capability: a.grant(t, "exec:ls", capability.Exec)})
	wantRefused(t, err, "the grant of ls is the program the sandbox's PATH finds")

	// exec:* grants every program: the limit is not applied.
	run(any, "git", "x")
	run(any, "make")
	for _, f := range []string{"aliased", "made"} {
		if !a.exists(f) {
			t.Errorf("%s: under exec:* the helper did not run", f)
		}
	}
}
