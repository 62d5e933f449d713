package policy

import (
	"slices"
	"strings"
	"testing"
)

func TestPrograms(t *testing.T) {
	sh := func(script string) []string { return []string{"sh", "-c", script} }
	for _, tc := range []struct {
		name string
		argv []string
		want []string
	}{
		{"one program", []string{"ls", "-l"}, []string{"ls"}},
		{"by base name", []string{"/usr/bin/git", "status"}, []string{"git"}},
		{"a shell keeps its own name", []string{"/bin/bash", "-c", "true"}, []string{"bash"}},
		{"sh -c list", sh("ls; curl x"), []string{"sh", "ls", "curl"}},
		{"pipeline and and-or", sh("cat f | grep x && wc -l || tr a b"), []string{"sh", "cat", "grep", "wc", "tr"}},
		{"each once", sh("ls; ls; /bin/ls"), []string{"sh", "ls"}},
		{"substitutions", sh("echo $(date) `id` <(uname)"), []string{"sh", "date", "id", "uname"}},
		{"sh -c in sh -c", sh("bash -c 'nc -l 1'"), []string{"sh", "bash", "nc"}},
		{"wrappers", []string{"env", "A=1", "nice", "-n", "5", "timeout", "3", "node", "x.js"}, []string{"env", "nice", "timeout", "node"}},
		{"sudo", []string{"sudo", "-u", "bob", "make"}, []string{"sudo", "make"}},
		{"sudo -s runs a shell", []string{"sudo", "-s"}, []string{"sudo", "sh"}},
		{"find -exec", []string{"find", ".", "-exec", "rm", "{}", ";"}, []string{"find", "rm"}},
		{"xargs", sh("ls | xargs -0 grep x"), []string{"sh", "ls", "xargs", "grep"}},
		{"xargs without a command runs echo", []string{"xargs"}, []string{"xargs", "echo"}},
		{"watch hands its words to sh", []string{"watch", "-n", "1", "ls"}, []string{"watch", "sh", "ls"}},
		{"flock -c", []string{"flock", "/tmp/l", "-c", "make"}, []string{"flock", "sh", "make"}},
		{"env -S splits without a shell", []string{"env", "-S", "echo x"}, []string{"env", "echo"}},
		{"here-document fed to a shell", sh("bash <<EOF\nwget x\nEOF"), []string{"sh", "bash", "wget"}},
		{"trap action", sh("trap 'rm -f t' EXIT; touch t"), []string{"sh", "rm", "touch"}},
		{"function body and call", sh("f() { curl x; }; f"), []string{"sh", "curl", "f"}},
		{"control flow", sh("if test -f x; then make; else for i in 1 2; do go test; done; fi"), []string{"sh", "make", "go"}},
		{"builtins in a shell are not programs", sh("cd /tmp && echo hi; true; [ -f x ]; printf %s y; read v; pwd"), []string{"sh"}},
		{"argv[0] is a program even with a builtin's name", []string{"echo", "hi"}, []string{"echo"}},
		{"a builtin's name with a path is a program", sh("/bin/echo hi"), []string{"sh", "echo"}},
		{"a wrapper that is a program execs builtins' names", sh("env echo hi; xargs kill; find . -exec test -f {} ';'"), []string{"sh", "env", "echo", "xargs", "kill", "find", "test"}},
		{"command and builtin stay in the shell", sh("command echo hi; builtin cd /; command -p ls"), []string{"sh", "ls"}},
		{"exec execs", sh("exec echo hi"), []string{"sh", "echo"}},
		{"a shell reading a file or stdin runs what it reads, unseen", []string{"bash", "script.sh"}, []string{"bash"}},
		{"interactive shell", []string{"bash", "-i"}, []string{"bash"}},
		{"interpreters are not looked into", []string{"python3", "-c", "import os; os.system('curl x')"}, []string{"python3"}},
		{"assignments only", sh("X=1; Y=$(date)"), []string{"sh", "date"}},
		{"enable alone lists builtins", sh("enable"), []string{"sh"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Programs(tc.argv)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("Programs(%q) = %q, %v; want %q", tc.argv, got, err, tc.want)
			}
		})
	}
}

func TestProgramsRefusesWhatCannotBeKnown(t *testing.T) {
	sh := func(script string) []string { return []string{"sh", "-c", script} }
	many := strings.Repeat("ls;", maxCommands+1)
	for _, tc := range []struct {
		name string
		argv []string
		want string
	}{
		{"empty argv", nil, "an empty argv runs nothing"},
		{"NUL byte", []string{"ls", "a\x00b"}, "argument 1 holds a NUL byte"},
		{"variable as command name", sh(`$CMD x`), "the program name is not literal"},
		{"substitution as command name", sh(`"$(echo curl)" x`), "the program name is not literal"},
		{"glob as command name", sh(`/bin/c?rl x`), "is a glob"},
		{"eval", sh("eval curl x"), "eval runs a string as shell code"},
		{"source", sh("source ./x.sh"), "source runs the commands in a file"},
		{"dot", sh(". ./x.sh"), ". runs the commands in a file"},
		{"eval as argv[0]", []string{"eval", "ls"}, "eval runs a string"},
		{"too many commands", sh(many), "more than 1000 commands"},
		{"script does not parse", sh("ls; (curl"), "the sh -c string does not parse"},
		{"sh -c string not literal", sh(`sh -c "$X"`), "sh -c with a command string that is not literal"},
		{"nested too deeply", sh(strings.Repeat("sh -c '", 1) + strings.Repeat("nice ", 10) + "ls'"), "nested more than 8 levels"},
		{"enable with an argument", sh("enable -n echo; echo x"), "enable with an argument"},
		{"compgen -C", sh("compgen -C 'curl x' y"), "compgen -C runs a command string"},
		{"bind -x", sh(`bind -x '"\C-x": curl x'`), "bind -x runs a command string"},
		{"no program name", []string{"/usr/bin/"}, `"/usr/bin/" names no program`},
		{"wrapper option not literal", sh(`env $OPT ls`), "env given a word that is not literal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Programs(tc.argv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Programs(%.60q) = %q, %v; want an error containing %q", tc.argv, got, err, tc.want)
			}
		})
	}
}

// TestProgramsErrorNamesTheCommand: the error quotes the command that cannot be known, so
// that the refusal a caller gets says where in a long command line it is.
func TestProgramsErrorNamesTheCommand(t *testing.T) {
	_, err := Programs([]string{"sh", "-c", "ls; eval \"$X\"; pwd"})
	want := `"eval \"$X\"": cannot tell what runs: eval runs a string as shell code`
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %s", err, want)
	}
}

// TestProgramsLeavesDecisionsAlone: what Programs records about builtins and implied
// programs does not change how the shell rules decide.
func TestProgramsLeavesDecisionsAlone(t *testing.T) {
	p := mustLoad(t, "shell:\n  allow_prefixes: [watch, xargs, sh, ls, echo]\n")
	for _, argv := range [][]string{{"watch", "ls"}, {"xargs"}, {"sh", "-c", "echo x"}} {
		if d := p.Shell(argv); !d.Allow {
			t.Errorf("Shell(%q) = %v, want allowed", argv, d)
		}
	}
}
