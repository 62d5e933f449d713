package policy

import (
	"strings"
	"testing"
)

// denyPolicy is the deny list.
const denyPolicy = `
shell:
  deny:
    - "rm -rf /"
    - "curl * | sh"
    - "wget * | bash"
`

func mustLoad(t testing.TB, src string) *Policy {
	t.Helper()
	p, err := Load([]byte(src), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// wantShell checks a decision's verdict, its rule, and that its reason says want.
func wantShell(t *testing.T, d Decision, allow bool, rule, want string) {
	t.Helper()
	if d.Allow != allow || d.Rule != rule || !strings.Contains(d.Reason, want) {
		t.Errorf("got %v; want allow=%v rule %s reason containing %q", d, allow, rule, want)
	}
}

func TestShellScriptDeny(t *testing.T) {
	p := mustLoad(t, denyPolicy)
	const undecidable = "cannot be decided"
	tests := []struct {
		name, script string
		allow        bool
		rule, reason string
	}{
		{"plain", "rm -rf /", false, "shell.deny[0]", `matches "rm -rf /"`},
		{"other target", "rm -rf build", true, "shell.deny", "no deny rule"},
		{"no flags", "rm /", true, "shell.deny", ""},
		{"only recursive", "rm -r /", true, "shell.deny", ""},
		{"fr", "rm -fr /", false, "shell.deny[0]", ""},
		{"split flags", "rm -r -f /", false, "shell.deny[0]", ""},
		{"capital R", "rm -Rf /", false, "shell.deny[0]", ""},
		{"long flags", "rm --recursive --force /", false, "shell.deny[0]", ""},
		{"abbreviated long", "rm --recu --forc /", false, "shell.deny[0]", ""},
		{"flags after operand", "rm / -rf", false, "shell.deny[0]", ""},
		{"more operands", "rm -rf /tmp/x /", false, "shell.deny[0]", ""},
		{"no-preserve-root", "rm -rf --no-preserve-root /", false, "shell.deny[0]", ""},
		{"end of options", "rm -rf -- /", false, "shell.deny[0]", ""},
		{"slash star", "rm -rf /*", false, "shell.deny[0]", ""},
		{"double slash", "rm -rf //", false, "shell.deny[0]", ""},
		{"slash dot", "rm -rf /.", false, "shell.deny[0]", ""},
		{"dot dot", "rm -rf /tmp/..", false, "shell.deny[0]", ""},
		{"quoted star is literal", "rm -rf '/*'", true, "shell.deny", ""},
		{"in a pipeline", "echo hi | rm -rf / | cat", false, "shell.deny[0]", ""},
		{"after &&", "make && rm -rf /", false, "shell.deny[0]", ""},
		{"after ||", "false || rm -rf /", false, "shell.deny[0]", ""},
		{"after ;", "ls; rm -rf /", false, "shell.deny[0]", ""},
		{"background", "rm -rf / &", false, "shell.deny[0]", ""},
		{"subshell", "(cd /tmp; rm -rf /)", false, "shell.deny[0]", ""},
		{"group", "{ rm -rf /; }", false, "shell.deny[0]", ""},
		{"if", "if true; then rm -rf /; fi", false, "shell.deny[0]", ""},
		{"while condition", "while rm -rf /; do :; done", false, "shell.deny[0]", ""},
		{"for body", "for x in a; do rm -rf /; done", false, "shell.deny[0]", ""},
		{"case", "case x in x) rm -rf /;; esac", false, "shell.deny[0]", ""},
		{"sh -c", "sh -c 'rm -rf /'", false, "shell.deny[0]", ""},
		{"bash -c", `bash -c "rm -rf /"`, false, "shell.deny[0]", ""},
		{"dash -ec", "dash -ec 'rm -rf /'", false, "shell.deny[0]", ""},
		{"sh -c in sh -c", `sh -c "bash -c 'rm -rf /'"`, false, "shell.deny[0]", ""},
		{"command substitution", "echo $(rm -rf /)", false, "shell.deny[0]", ""},
		{"in double quotes", `echo "$(rm -rf /)"`, false, "shell.deny[0]", ""},
		{"backticks", "echo `rm -rf /`", false, "shell.deny[0]", ""},
		{"process substitution", "cat <(rm -rf /)", false, "shell.deny[0]", ""},
		{"in a parameter default", `echo "${x:-$(rm -rf /)}"`, false, "shell.deny[0]", ""},
		{"in an assignment", "x=$(rm -rf /)", false, "shell.deny[0]", ""},
		{"in a redirection", "echo > $(rm -rf /)", false, "shell.deny[0]", ""},
		{"in arithmetic", "echo $(( $(rm -rf /) ))", false, "shell.deny[0]", ""},
		{"function body", "f() { rm -rf /; }", false, "shell.deny[0]", ""},
		{"function keyword", "function f { rm -rf /; }; f", false, "shell.deny[0]", ""},
		{"function shadows a name", "ls() { rm -rf /; }; ls", false, "shell.deny[0]", ""},
		{"absolute path", "/bin/rm -rf /", false, "shell.deny[0]", ""},
		{"relative path", "./rm -rf /", false, "shell.deny[0]", ""},
		{"empty quotes in name", "r''m -rf /", false, "shell.deny[0]", ""},
		{"backslash", `\rm -rf /`, false, "shell.deny[0]", ""},
		{"double-quoted name", `"rm" -rf /`, false, "shell.deny[0]", ""},
		{"quoted flags", `rm "-rf" '/'`, false, "shell.deny[0]", ""},
		{"brace expansion", "{rm,-rf,/}", false, "shell.deny[0]", ""},
		{"brace in args", "rm {-rf,/}", false, "shell.deny[0]", ""},
		{"here-document to sh", "sh <<'EOF'\nrm -rf /\nEOF", false, "shell.deny[0]", ""},
		{"unquoted here-document", "bash <<EOF\nrm -rf /\nEOF", false, "shell.deny[0]", ""},
		{"here-string", "bash <<< 'rm -rf /'", false, "shell.deny[0]", ""},
		{"trap action", "trap 'rm -rf /' EXIT", false, "shell.deny[0]", ""},
		{"sudo", "sudo rm -rf /", false, "shell.deny[0]", ""},
		{"sudo -u", "sudo -u root rm -rf /", false, "shell.deny[0]", ""},
		{"env with assignments", "env -i A=1 rm -rf /", false, "shell.deny[0]", ""},
		{"env -S", "env -S 'rm -rf /'", false, "shell.deny[0]", ""},
		{"nice", "nice -n 10 rm -rf /", false, "shell.deny[0]", ""},
		{"nice -N", "nice -10 rm -rf /", false, "shell.deny[0]", ""},
		{"timeout", "timeout -s KILL 5 rm -rf /", false, "shell.deny[0]", ""},
		{"command", "command rm -rf /", false, "shell.deny[0]", ""},
		{"exec", "exec rm -rf /", false, "shell.deny[0]", ""},
		{"busybox", "busybox rm -rf /", false, "shell.deny[0]", ""},
		{"busybox sh", "busybox sh -c 'rm -rf /'", false, "shell.deny[0]", ""},
		{"wrapper chain", "nohup nice env rm -rf /", false, "shell.deny[0]", ""},
		{"find -exec", `find /tmp -exec rm -rf / \;`, false, "shell.deny[0]", ""},
		{"watch joins its words", "watch rm -rf /", false, "shell.deny[0]", ""},
		{"flock -c", "flock /tmp/l -c 'rm -rf /'", false, "shell.deny[0]", ""},
		{"su -c", "su -c 'rm -rf /' root", false, "shell.deny[0]", ""},
		{"xargs", "echo / | xargs rm -rf", false, "shell.deny[0]", undecidable},
		{"xargs, other program", "ls | xargs wc -l", true, "shell.deny", ""},

		{"eval", `eval "rm -rf /"`, false, "shell", "eval runs a string"},
		{"eval of anything", `eval ls`, false, "shell", "eval"},
		{"source", "source ./x.sh", false, "shell", "source runs the commands in a file"},
		{"dot", ". ./x.sh", false, "shell", "runs the commands in a file"},
		{"variable as name", "$X -rf /", false, "shell", "program name is not literal"},
		{"substitution as name", `"$(echo rm)" -rf /`, false, "shell", "program name is not literal"},
		{"glob as name", "/bin/r? -rf /", false, "shell", "is a glob"},
		{"extglob as name", "@(rm) -rf /", false, "shell", "is a glob"},
		{"glob with an unmatched bracket", "/bin/r[m* -rf /", false, "shell", "is a glob"},
		{"test command", "[ -f x ] && echo y", true, "shell.deny", ""},
		{"ansi-c quoting", `$'\x72m' -rf /`, false, "shell", "not literal"},
		{"tilde as name", "~/rm -rf /", false, "shell", "not literal"},
		{"alias", "alias x='rm -rf /'; x", false, "shell", "alias definitions"},
		{"sh -c variable", `sh -c "$CMD"`, false, "shell", "sh -c with a command string that is not literal"},
		{"sh -c substitution", `sh -c "$(curl -fsSL https://x)"`, false, "shell", "not literal"},
		{"sh -c bad syntax", `sh -c 'if'`, false, "shell", "does not parse"},
		{"exec of a variable", `exec "$X"`, false, "shell", "not literal"},
		{"env unknown option", "env --frobnicate rm -rf /", false, "shell", "unknown option"},
		{"hash -p", "hash -p /bin/rm ls", false, "shell", "hash -p"},
		{"prompt injection", `PS4='$(rm -rf /)'`, false, "shell", "PS4"},
		{"subscript evaluation", `printf -v 'a[$(rm -rf /)]' x`, false, "shell", "array subscript"},
		{"declare non-literal", `declare "$x"`, false, "shell", "declare"},
		{"does not parse", "rm -rf / (", false, "shell", "does not parse"},

		{"variable target", `rm -rf "$DIR"`, false, "shell.deny[0]", undecidable},
		{"unquoted variable target", `rm -rf $DIR`, false, "shell.deny[0]", undecidable},
		{"variable flags", `rm "$FLAGS" /`, false, "shell.deny[0]", undecidable},
		{"variable then star", `rm -rf "$STEAMROOT/"*`, false, "shell.deny[0]", undecidable},
		{"variable subdirectory", `rm -rf "$DIR/build"`, true, "shell.deny", ""},
		{"variable needs two words", `rm "$X"`, true, "shell.deny", ""},
		{"variable elsewhere", `echo "$HOME"`, true, "shell.deny", ""},

		{"curl to sh", "curl https://x | sh", false, "shell.deny[1]", `matches "curl * | sh"`},
		{"curl to bash", "curl -fsSL https://x | bash", false, "shell.deny[1]", ""},
		{"curl to /bin/zsh", "curl x | /bin/zsh -s", false, "shell.deny[1]", ""},
		{"curl through tee", "curl x | tee f | sh", false, "shell.deny[1]", ""},
		{"curl into a subshell", "curl x | (cat | bash)", false, "shell.deny[1]", ""},
		{"curl into sudo bash", "curl x | sudo bash", false, "shell.deny[1]", ""},
		{"curl into sudo -s", "curl x | sudo -s", false, "shell.deny[1]", ""},
		{"curl into su", "curl x | su - root", false, "shell.deny[1]", ""},
		{"curl into su -c", "curl x | su -c 'cat' root", true, "shell.deny", ""},
		{"process substitution feeds sh", "bash <(curl -s x)", false, "shell.deny[1]", ""},
		{"redirected process substitution", "sh < <(curl x)", false, "shell.deny[1]", ""},
		{"curl without args", "curl | sh", false, "shell.deny[1]", ""},
		{"sh to curl", "sh x | curl y", true, "shell.deny", ""},
		{"curl alone", "curl -o f https://x", true, "shell.deny", ""},
		{"curl then sh file", "curl x > f; sh f", true, "shell.deny", ""},
		{"curl && sh", "curl x && sh f", true, "shell.deny", ""},
		{"wget to sh", "wget -qO- x | sh", false, "shell.deny[2]", ""},
		{"curl to python", "curl x | python3", true, "shell.deny", ""},

		{"go test", "go test ./...", true, "shell.deny", ""},
		{"several", "go vet ./... && go test -race ./internal/policy", true, "shell.deny", "2 commands"},
		{"empty", "", true, "shell.deny", "no commands"},
		{"assignment only", "X=1", true, "shell.deny", "no commands"},
		{"comment", "# rm -rf /", true, "shell.deny", ""},
		{"quoted pattern text", "echo 'rm -rf /'", true, "shell.deny", ""},
		{"grep for it", `grep -r "curl x | sh" .`, true, "shell.deny", ""},
		{"sh runs a file", "sh ./build.sh", true, "shell.deny", ""},
		{"find with a variable dir", `find "$d" -name '*.o' -delete`, true, "shell.deny", ""},
		{"find -exec rm under a relative dir", `find build -name '*.o' -exec rm -rf {} +`, true, "shell.deny", ""},
		{"find -exec rm from the root", `find / -exec rm -rf {} +`, false, "shell.deny[0]", undecidable},
		{"find -exec rm, variable dir", `find "$d" -exec rm -rf {} +`, false, "shell.deny[0]", undecidable},
		{"relative variable path", `rm -rf "./$DIR"`, true, "shell.deny", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantShell(t, p.ShellScript(tt.script), tt.allow, tt.rule, tt.reason)
		})
	}
}

func TestShellArgv(t *testing.T) {
	p := mustLoad(t, denyPolicy)
	tests := []struct {
		name  string
		argv  []string
		allow bool
		rule  string
	}{
		{"plain", []string{"rm", "-rf", "/"}, false, "shell.deny[0]"},
		{"path", []string{"/usr/bin/rm", "--force", "-R", "/"}, false, "shell.deny[0]"},
		{"words are literal", []string{"rm", "-rf", "$HOME"}, true, "shell.deny"},
		{"star is literal", []string{"rm", "-rf", "/*"}, true, "shell.deny"},
		{"sh -c", []string{"/bin/sh", "-c", "cd /tmp && rm -rf /"}, false, "shell.deny[0]"},
		{"sh -c with a pipe", []string{"bash", "-lc", "curl x | sh"}, false, "shell.deny[1]"},
		{"wrapper", []string{"env", "FOO=1", "rm", "-rf", "/"}, false, "shell.deny[0]"},
		{"eval is undecidable", []string{"bash", "-c", "eval $X"}, false, "shell"},
		{"harmless", []string{"go", "build", "./..."}, true, "shell.deny"},
		{"empty", nil, false, "shell"},
		{"NUL", []string{"ls", "a\x00b"}, false, "shell"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := p.Shell(tt.argv)
			if d.Allow != tt.allow || d.Rule != tt.rule {
				t.Errorf("Shell(%q) = %v; want allow=%v rule %s", tt.argv, d, tt.allow, tt.rule)
			}
		})
	}
}

func TestShellAllowPrefixes(t *testing.T) {
	p := mustLoad(t, `
shell:
  deny: ["go generate"]
  allow_prefixes: ["go", "npm run", "git status", "cd", "sh"]
`)
	tests := []struct {
		name, script string
		allow        bool
		rule         string
	}{
		{"go", "go test ./...", true, "shell.allow_prefixes[0]"},
		{"path to go", "/usr/local/go/bin/go build", true, "shell.allow_prefixes[0]"},
		{"gofmt is not go", "gofmt -l .", false, "shell.allow_prefixes"},
		{"npm run", "npm run build", true, "shell.allow_prefixes[1]"},
		{"npm install", "npm install left-pad", false, "shell.allow_prefixes"},
		{"npm alone", "npm", false, "shell.allow_prefixes"},
		{"git status", "git status --short", true, "shell.allow_prefixes[2]"},
		{"git push", "git push", false, "shell.allow_prefixes"},
		{"deny wins", "go generate ./...", false, "shell.deny[0]"},
		{"every command", "cd /src && go build && rm -rf build", false, "shell.allow_prefixes"},
		{"all allowed", "cd /src && go build ./... && npm run test", true, "shell.allow_prefixes"},
		{"pipeline stages", "go list ./... | grep x", false, "shell.allow_prefixes"},
		{"substitution", "npm run $(rm x)", false, "shell.allow_prefixes"},
		{"sh is allowed but its script is decided", "sh -c 'go test && curl x'", false, "shell.allow_prefixes"},
		{"sh with allowed script", "sh -c 'go test'", true, "shell.allow_prefixes"},
		{"variable after the prefix", `npm run "$SCRIPT"`, true, "shell.allow_prefixes[1]"},
		{"a variable could spell a denied subcommand", `go test "$PKG"`, false, "shell.deny[0]"},
		{"a literal cannot", `go test ./pkg/generate`, true, "shell.allow_prefixes[0]"},
		{"variable in the prefix", `npm "$CMD" build`, false, "shell.allow_prefixes"},
		{"variable as name", `$GO test`, false, "shell"},
		{"eval", "eval go test", false, "shell"},
		{"function body decided", "t() { go test; }", true, "shell.allow_prefixes[0]"},
		{"function call is a command like any", "t() { go test; }; t", false, "shell.allow_prefixes"},
		{"a function named like an allowed program", "go() { curl x; }; go", false, "shell.allow_prefixes"},
		{"wrapper must be allowed", "nice go test", false, "shell.allow_prefixes"},
		{"a deny rule is named over the allow list", "sudo go generate", false, "shell.deny[0]"},
		{"undecidable is named over the allow list", "ls; eval x", false, "shell"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := p.ShellScript(tt.script)
			if d.Allow != tt.allow || d.Rule != tt.rule {
				t.Errorf("ShellScript(%q) = %v; want allow=%v rule %s", tt.script, d, tt.allow, tt.rule)
			}
		})
	}
}

// With no shell rules there is nothing to decide against: everything is allowed, and the
// decision says so.
func TestShellNoRules(t *testing.T) {
	p := mustLoad(t, "network: {default: deny}\n")
	for _, script := range []string{"rm -rf /", "eval $X", "$CMD", "if"} {
		if d := p.ShellScript(script); !d.Allow || d.Rule != "shell" || d.Reason != "no shell rules" {
			t.Errorf("ShellScript(%q) = %v; want allow shell: no shell rules", script, d)
		}
	}
	if d := p.Shell([]string{"rm", "-rf", "/"}); !d.Allow || d.Rule != "shell" {
		t.Errorf("Shell = %v", d)
	}
	ds := p.ExplainScript("a | b; c")
	if len(ds) != 3 || !ds[2].Allow || ds[2].Command != "c" {
		t.Errorf("ExplainScript = %+v", ds)
	}
}

func TestExplainScript(t *testing.T) {
	p := mustLoad(t, denyPolicy)
	ds := p.ExplainScript("curl -s x | tee log | bash; echo done")
	want := []struct {
		cmd   string
		allow bool
		rule  string
	}{
		{"curl -s x", true, "shell.deny"},
		{"tee log", true, "shell.deny"},
		{"bash", false, "shell.deny[1]"},
		{"echo done", true, "shell.deny"},
	}
	if len(ds) != len(want) {
		t.Fatalf("got %d decisions, want %d: %+v", len(ds), len(want), ds)
	}
	for i, w := range want {
		if ds[i].Command != w.cmd || ds[i].Allow != w.allow || ds[i].Rule != w.rule {
			t.Errorf("decision %d = %q %v; want %q allow=%v %s", i, ds[i].Command, ds[i].Decision, w.cmd, w.allow, w.rule)
		}
	}
	// A wrapper and the command it runs are both listed.
	ds = p.ExplainShell([]string{"sudo", "-u", "x", "sh", "-c", "rm -rf /tmp/x"})
	if len(ds) != 3 || ds[0].Command != "sudo -u x sh -c 'rm -rf /tmp/x'" || ds[1].Command != "sh -c 'rm -rf /tmp/x'" || ds[2].Command != "rm -rf /tmp/x" {
		t.Errorf("ExplainShell = %+v", ds)
	}
	// The decision on a script names the command.
	if d := p.ShellScript("ls; rm -rf /"); !strings.HasPrefix(d.Reason, `"rm -rf /": `) {
		t.Errorf("reason %q does not start with the command", d.Reason)
	}
}

// Too much input is denied, not decided slowly.
func TestShellLimits(t *testing.T) {
	p := mustLoad(t, denyPolicy)
	tests := []struct {
		name, script, reason string
	}{
		{"many commands", strings.Repeat("true;", maxCommands+1), "more than 1000 commands"},
		{"deep sh -c", nestSh(maxNest + 2), "nested more than"},
		{"huge braces", "echo {1..100000}", ""},
		{"braces at the edges of int64", "echo {9223372036854775800..9223372036854775807} {-9223372036854775808..9223372036854775807}", ""},
		{"braces with a huge step", "rm {-rf,/} {1..9223372036854775807..-9223372036854775807}", "shell.deny[0]"},
		{"many braces", "echo " + strings.Repeat("{a,b}", 40), ""},
		{"many braces as the name", strings.Repeat("{a,b}", 40), "not literal"},
		{"long script", strings.Repeat("#", maxScript+1), "longer than"},
		{"long pipeline", strings.Repeat("cat x|", 999) + "cat", "nested more than"},
		{"long pipeline, denied on its merits", strings.Repeat("curl x|", 999) + "sh", "shell.deny[1]"},
		{"pipeline within the limits", strings.Repeat("curl x|", 150) + "sh", "shell.deny[1]"},
		{"deep substitutions", strings.Repeat("$(", 5000) + strings.Repeat(")", 5000), "nested more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := p.ShellScript(tt.script)
			if tt.reason == "" {
				if !d.Allow {
					t.Errorf("got %v, want allowed", d)
				}
				return
			}
			if d.Allow || !(strings.Contains(d.Reason, tt.reason) || d.Rule == tt.reason) {
				t.Errorf("got %v, want denied with %q", d, tt.reason)
			}
		})
	}
}

// nestSh is n levels of sh -c, each quoting the next.
func nestSh(n int) string {
	s := "true"
	for range n {
		s = "sh -c " + shQuote(s)
	}
	return s
}

func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func TestShellDeterministic(t *testing.T) {
	p := mustLoad(t, denyPolicy+"  allow_prefixes: [go, curl, sh, rm]\n")
	scripts := []string{"curl x | sh", "rm -rf / && go test", "$X; eval y", "go test", "sh -c 'rm -rf \"$D\"'"}
	for _, s := range scripts {
		first := p.ShellScript(s)
		for range 20 {
			if d := p.ShellScript(s); d != first {
				t.Fatalf("ShellScript(%q) gave %v, then %v", s, first, d)
			}
		}
	}
}

// A glob in the command against a glob in a deny rule: denied when the rule's glob matches
// the command's as written (so a rule denies its own text, and * meets every glob), not
// when the two share no name. Found by FuzzShellRules: "0 */" did not deny itself.
func TestShellGlobAgainstGlob(t *testing.T) {
	p := mustLoad(t, "shell:\n  deny: [\"0 */\", \"cat *.txt\", \"rm *\"]\n")
	for _, tc := range []struct {
		script string
		allow  bool
		rule   string
	}{
		{"0 */", false, "shell.deny[0]"},
		{"cat *.txt", false, "shell.deny[1]"},
		{"cat a*.txt", false, "shell.deny[1]"},
		{"cat *.go", true, "shell.deny"},
		{"rm *.go", false, "shell.deny[2]"},
	} {
		d := p.ShellScript(tc.script)
		if d.Allow != tc.allow || d.Rule != tc.rule {
			t.Errorf("%q: %v, want allow=%v by %s", tc.script, d, tc.allow, tc.rule)
		}
	}
	// A glob with a quoted star: the same glob, whatever path.Match makes of its escapes.
	q := mustLoad(t, "shell:\n  deny: [\"0 \\\"*\\\"*\"]\n")
	if d := q.ShellScript(`0 "*"*`); d.Allow || d.Rule != "shell.deny[0]" {
		t.Errorf(`0 "*"*: %v, want it denied by its own rule`, d)
	}
}
