package policy

import (
	"fmt"
	"strings"
	"testing"
)

func TestStdinShell(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want bool
	}{
		{[]string{"sh"}, true},
		{[]string{"/bin/bash", "-i"}, true},
		{[]string{"bash", "-s", "x"}, true},
		{[]string{"env", "A=b", "bash"}, true},
		{[]string{"sudo", "-s"}, true},
		{[]string{"su"}, true},
		{[]string{"sh", "-c", "bash"}, true},
		{[]string{"nice", "zsh", "-l"}, true},
		{[]string{"sh", "-c", "ls"}, false},
		{[]string{"sh", "script.sh"}, false},
		{[]string{"sh", "-c", "bash < f"}, false},
		{[]string{"sh", "-c", "bash <<< ls"}, false},
		{[]string{"ls", "-l"}, false},
		{[]string{"python3"}, false}, // other languages are not seen, as python -c is not
		{nil, false},
	} {
		if got := StdinShell(tc.argv); got != tc.want {
			t.Errorf("StdinShell(%q) = %v, want %v", tc.argv, got, tc.want)
		}
	}
}

func TestInteractive(t *testing.T) {
	for _, tc := range []struct {
		src   string
		allow bool
		rule  string
	}{
		{"files: {jail: /w}\n", true, "shell"},
		{"shell: {deny: [\"rm -rf /\"]}\n", false, "shell.interactive"},
		{"shell: {deny: [\"rm -rf /\"], interactive: deny}\n", false, "shell.interactive"},
		{"shell: {deny: [\"rm -rf /\"], interactive: allow}\n", true, "shell.interactive"},
	} {
		d := mustLoad(t, tc.src).Interactive()
		if d.Allow != tc.allow || d.Rule != tc.rule {
			t.Errorf("%q: Interactive() = %v", tc.src, d)
		}
	}
	if _, err := Load([]byte("shell:\n  interactive: true\n"), "p"); err == nil || err.Error() != "p:2: shell.interactive: want allow or deny, got the boolean true" {
		t.Errorf("interactive: true: %v", err)
	}
}

func TestShellEnv(t *testing.T) {
	p := mustLoad(t, "shell: {deny: [\"rm -rf /\"]}\n")
	for _, tc := range []struct {
		env   []string
		allow bool
	}{
		{[]string{"A=b", "PATH=/bin"}, true},
		{[]string{"A=b", "BASH_FUNC_ls%%=() { rm -rf /; }"}, false},
		{[]string{"PS1=$(rm -rf /)"}, false},
		{[]string{"PS1=> "}, true},
	} {
		if d := p.ShellEnv(tc.env); d.Allow != tc.allow {
			t.Errorf("ShellEnv(%q) = %v", tc.env, d)
		}
	}
	if d := mustLoad(t, "files: {jail: /w}\n").ShellEnv([]string{"BASH_FUNC_x%%=() { :; }"}); !d.Allow {
		t.Errorf("without shell rules: %v", d)
	}
}

// An exec's argv and environment are untrusted: deciding them never panics and always
// gives the same answer, with a rule and a reason.
func FuzzExec(f *testing.F) {
	p := mustLoad(f, denyPolicy)
	for _, s := range []string{"sh", "bash\x00-i", "sudo\x00-s", "env\x00A=b\x00bash", "sh\x00-c\x00bash <<< x", "su\x00-c", "nice\x00zsh"} {
		f.Add(s, "BASH_FUNC_x%%=() { :; }\x00PS1=$(x)")
	}
	f.Fuzz(func(t *testing.T, argv, env string) {
		args, vars := strings.Split(argv, "\x00"), strings.Split(env, "\x00")
		if first, again := StdinShell(args), StdinShell(args); first != again {
			t.Fatalf("StdinShell(%q) not deterministic", args)
		}
		d := p.ShellEnv(vars)
		if d != p.ShellEnv(vars) || d.Rule == "" || d.Reason == "" {
			t.Fatalf("ShellEnv(%q) = %+v", vars, d)
		}
	})
}

func TestEnvCode(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"A=b", "PATH=/bin", "PS1=> "}, ""},
		{[]string{"A=b", "BASH_FUNC_ls%%=() { curl x; }"}, "env[1]: BASH_FUNC_ls%% defines a bash function, code that runs in place of a command"},
		{[]string{"PROMPT_COMMAND=`curl x`"}, "env[0]: PROMPT_COMMAND is expanded as a prompt, and its value can run code"},
	} {
		err := EnvCode(tc.env)
		if got := fmt.Sprint(err); (err == nil) != (tc.want == "") || (err != nil && got != tc.want) {
			t.Errorf("EnvCode(%q) = %v, want %q", tc.env, err, tc.want)
		}
	}
}
