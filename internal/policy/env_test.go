package policy

import (
	"errors"
	"strings"
	"testing"
)

// A gated exec's environment is an allowlist: the loader's, shells', interpreters' and
// tools' variables are refused with the rule that names their class, even when a policy
// lists them; any other name not listed is refused too.
func TestGatedEnv(t *testing.T) {
	for _, tc := range []struct {
		entry, rule string
	}{
		{"LD_PRELOAD=/workspace/src/evil.ts", "env.loader"},
		{"LD_LIBRARY_PATH=/workspace", "env.loader"},
		{"LD_AUDIT=/tmp/a.so", "env.loader"},
		{"GCONV_PATH=/workspace", "env.loader"},
		{"GLIBC_TUNABLES=glibc.malloc.check=3", "env.loader"},
		{"MALLOC_TRACE=/workspace/x", "env.loader"},
		{"TMPDIR=/workspace", "env.loader"},
		{"BASH_ENV=/workspace/x.sh", "env.shell"},
		{"ENV=/workspace/x.sh", "env.shell"},
		{"BASH_FUNC_ls%%=() { id; }", "env.shell"},
		{"PS4=$(id)", "env.shell"},
		{"SHELLOPTS=xtrace", "env.shell"},
		{"PROMPT_COMMAND=id", "env.shell"},
		{"PATH=/workspace/bin:/usr/bin", "env.shell"},
		{"IFS=x", "env.allowlist"},
		{"PYTHONPATH=/workspace", "env.interpreter"},
		{"PYTHONSTARTUP=/workspace/x.py", "env.interpreter"},
		{"NODE_OPTIONS=--require /workspace/x.js", "env.interpreter"},
		{"PERL5OPT=-Mevil", "env.interpreter"},
		{"PERL5LIB=/workspace", "env.interpreter"},
		{"RUBYOPT=-revil", "env.interpreter"},
		{"JAVA_TOOL_OPTIONS=-javaagent:x.jar", "env.interpreter"},
		{"GOFLAGS=-toolexec=/workspace/x", "env.interpreter"},
		{"HOME=/workspace", "env.config"},
		{"XDG_CONFIG_HOME=/workspace", "env.config"},
		{"GIT_CONFIG_GLOBAL=/workspace/x", "env.config"},
		{"GIT_SSH_COMMAND=id", "env.config"},
		{"PAGER=id", "env.config"},
		{"LESSOPEN=|id", "env.config"},
		{"OPENSSL_CONF=/workspace/x", "env.config"},
		{"ld_preload=/x", "env.loader"},
		{"WHATEVER=1", "env.allowlist"},
		{"NOEQUALS", "env.allowlist"},
		{"TZ=/workspace/zone", "env.value"},
		{"TZ=:/workspace/zone", "env.value"},
		{"TZ=../../workspace/zone", "env.value"},
		{"LC_ALL=/workspace/locale", "env.value"},
		{"LANG=./x/y", "env.value"},
	} {
		err := GatedEnv([]string{"TERM=xterm", tc.entry}, []string{"WHATEVER_NOT", "LD_PRELOAD", "HOME"})
		var e *EnvError
		if !errors.As(err, &e) {
			t.Errorf("%s: allowed", tc.entry)
			continue
		}
		if e.Rule != tc.rule || e.Index != 1 || !strings.Contains(err.Error(), e.Name) {
			t.Errorf("%s: refused as %+v (%v), want rule %s at index 1", tc.entry, e, err, tc.rule)
		}
	}
	for _, ok := range []string{"TERM=xterm-256color", "LANG=C.UTF-8", "LC_ALL=en_US.UTF-8", "TZ=Europe/Paris", "NO_COLOR=1", "COLUMNS=80", "APP_MODE=test", "MY_APP_X=1"} {
		if err := GatedEnv([]string{ok}, []string{"APP_MODE", "MY_APP_*"}); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

// shell.env may not list a name of a class that brings code, nor a prefix that reaches
// one.
func TestShellEnvLoad(t *testing.T) {
	p, err := Load([]byte("shell:\n  allow_prefixes: [ls]\n  env: [APP_MODE, MY_APP_*]\n"), "p")
	if err != nil {
		t.Fatal(err)
	}
	if d := p.GatedEnv([]string{"MY_APP_X=1"}); !d.Allow {
		t.Errorf("listed prefix: %+v", d)
	}
	if d := p.GatedEnv([]string{"LD_PRELOAD=/x"}); d.Allow || d.Rule != "env.loader" {
		t.Errorf("LD_PRELOAD: %+v", d)
	}
	for _, bad := range []string{"LD_PRELOAD", "LD*", "PYTHONPATH", "HOME", "BASH_FUNC_x", "1X", "A-B", "*", "NODE_*"} {
		if _, err := Load([]byte("shell:\n  allow_prefixes: [ls]\n  env: [\""+bad+"\"]\n"), "p"); err == nil || !strings.Contains(err.Error(), "shell.env[0]") {
			t.Errorf("env %q: loaded (%v)", bad, err)
		}
	}
}

func FuzzGatedEnv(f *testing.F) {
	for _, s := range []string{"LD_PRELOAD=/x", "TERM=xterm", "TZ=:/x", "BASH_FUNC_a%%=() { :; }", "=x", "LC_ALL=C"} {
		f.Add(s, "APP_*")
	}
	f.Fuzz(func(t *testing.T, entry, allowed string) {
		err := GatedEnv([]string{entry}, []string{allowed})
		name, _, _ := strings.Cut(entry, "=")
		up := strings.ToUpper(name)
		if err == nil && (strings.HasPrefix(up, "LD_") || strings.HasPrefix(name, "BASH_FUNC_") || up == "PATH" || up == "HOME") {
			t.Fatalf("%q allowed with shell.env %q", entry, allowed)
		}
		if err != nil && checkEnvName(allowed) == nil && matchEnvName([]string{allowed}, name) && strings.Contains(entry, "=") && name != "" {
			var e *EnvError
			if !errors.As(err, &e) || e.Rule == "env.allowlist" {
				t.Fatalf("%q refused by the allowlist though shell.env %q lists it: %v", entry, allowed, err)
			}
		}
	})
}

// A command line cannot set what its env may not: an assignment before a command, an
// export or declare, or env's NAME=VALUE of a name that brings code is undecidable, for
// the shell rules and for Programs alike; mode names and names of no class are fine.
func TestAssignmentsInTheCommandLine(t *testing.T) {
	p, err := Load([]byte("shell:\n  deny: [\"rm -rf /\"]\n"), "p")
	if err != nil {
		t.Fatal(err)
	}
	for _, argv := range [][]string{
		{"sh", "-c", "LD_PRELOAD=/workspace/src/evil.ts ls"},
		{"env", "LD_PRELOAD=/workspace/src/evil.ts", "ls"},
		{"env", "-i", "GCONV_PATH=/workspace", "ls"},
		{"sh", "-c", "export PYTHONPATH=/workspace; python3 -m x"},
		{"bash", "-c", "declare -x BASH_ENV=/workspace/x; bash -c true"},
		{"sh", "-c", "PATH=/workspace/bin:$PATH ls"},
		{"sh", "-c", "GIT_CONFIG_GLOBAL=/workspace/g git status"},
		{"sh", "-c", "HOME=/workspace git status"},
	} {
		if d := p.Shell(argv); d.Allow || !strings.Contains(d.Reason, "in the command line") {
			t.Errorf("%q: %+v, want it undecidable for the assignment", argv, d)
		}
		if _, err := Programs(argv); err == nil || !strings.Contains(err.Error(), "in the command line") {
			t.Errorf("Programs(%q): %v, want it refused for the assignment", argv, err)
		}
	}
	for _, argv := range [][]string{
		{"sh", "-c", "NODE_ENV=production FOO=1 ls"},
		{"sh", "-c", "CGO_ENABLED=0 GOOS=linux go build ./..."},
		{"sh", "-c", "while IFS= read -r l; do echo \"$l\"; done < f"},
		{"env", "A=1", "ls"},
	} {
		if d := p.Shell(argv); !d.Allow {
			t.Errorf("%q: %+v", argv, d)
		}
		if _, err := Programs(argv); err != nil {
			t.Errorf("Programs(%q): %v", argv, err)
		}
	}
}
