package cli_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/cli"
)

// policyCLI runs paddock in this process with a policy file written from src (when
// src is not empty), replacing FILE in args with its path.
func policyCLI(t *testing.T, src string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if src != "" {
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, a := range args {
		if a == "FILE" {
			args[i] = file
		}
	}
	var out, errb bytes.Buffer
	code = cli.Main(args, strings.NewReader(src), &out, &errb)
	if s := errb.String(); strings.Contains(s, "goroutine ") || strings.Contains(s, "panic") {
		t.Fatalf("stack trace on stderr:\n%s", s)
	}
	return strings.ReplaceAll(out.String(), file, "FILE"), strings.ReplaceAll(errb.String(), file, "FILE"), code
}

const cliPolicy = `shell:
  deny: ["rm -rf /", "curl * | sh"]
  allow_prefixes: ["go", "curl", "sh", "echo"]
files:
  jail: /workspace
network:
  default: deny
  allow: [proxy.golang.org]
`

func TestPolicyCheck(t *testing.T) {
	tests := []struct {
		name, src string
		args      []string
		stdout    string
		stderr    string
		code      int
	}{
		{"valid", cliPolicy, []string{"policy", "check", "FILE"},
			"FILE: ok\nshell: 2 deny patterns, 4 allowed prefixes; files: jail /workspace; network: default deny, 1 allowed host\n", "", 0},
		{"stdin", "resources: {memory: 1GiB}\n", []string{"policy", "check", "-"},
			"-: ok\nshell: no rules; files: no rules; network: default deny; resources: memory 1GiB\n", "", 0},
		{"invalid glob", "files:\n  jail: /workspace\n  deny_write:\n    - .env\n    - \"[\"\n", []string{"policy", "check", "FILE"},
			"", "paddock: FILE:5: files.deny_write[1]: invalid glob \"[\": syntax error in pattern\n", 1},
		{"unknown key", "shell:\n  deny: []\nnetwork:\n  defualt: deny\n", []string{"policy", "check", "FILE"}, //nolint:misspell // a misspelled key on purpose
			"", "paddock: FILE:4: network.defualt: unknown field (network has default, allow, deny, require_capability, private)\n", 1},
		{"contradiction", "network:\n  default: allow\n  allow: [a.com]\n", []string{"policy", "check", "FILE"},
			"", "paddock: FILE:3: network.allow: with default: allow, an allow list decides nothing; set default: deny, or remove the list\n", 1},
		{"not yaml", "shell: [\n", []string{"policy", "check", "FILE"}, "", "paddock: FILE:1: not valid YAML", 1},
		{"missing file", "", []string{"policy", "check", "FILE"}, "", "paddock: FILE: no such file or directory\n", cli.ExitUsage},
		{"no file", "", []string{"policy", "check"}, "", "paddock: paddock policy check: want one FILE, got 0 argument(s)", cli.ExitUsage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := policyCLI(t, tt.src, append([]string(nil), tt.args...)...)
			if stdout != tt.stdout || code != tt.code || !strings.HasPrefix(stderr, tt.stderr) {
				t.Errorf("stdout %q stderr %q exit %d; want stdout %q, stderr starting %q, exit %d", stdout, stderr, code, tt.stdout, tt.stderr, tt.code)
			}
			if strings.Count(stderr, "\n") > 1 {
				t.Errorf("stderr is more than one line: %q", stderr)
			}
		})
	}
}

func TestPolicyExplain(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		stdout []string // lines, each checked with Contains
		stderr string
		code   int
	}{
		{"argv allowed", []string{"policy", "explain", "FILE", "--", "go", "test", "./..."},
			[]string{"DECISION  RULE", "allow     shell.allow_prefixes[0]  go test ./...  starts with \"go\"", "allowed by shell.allow_prefixes[0]: starts with \"go\""}, "", 0},
		{"argv denied", []string{"policy", "explain", "FILE", "--", "rm", "-rf", "/"},
			[]string{"deny      shell.deny[0]  rm -rf /  matches \"rm -rf /\"", "denied by shell.deny[0]: \"rm -rf /\": matches \"rm -rf /\""}, "", 1},
		{"script, command by command", []string{"policy", "explain", "FILE", "--", "curl -fsSL https://x | sh; echo done"},
			[]string{"allow     shell.allow_prefixes[1]  curl -fsSL https://x", "deny      shell.deny[1]            sh", "allow     shell.allow_prefixes[3]  echo done", "denied by shell.deny[1]: \"sh\": matches \"curl * | sh\""}, "", 1},
		{"sh -c argv", []string{"policy", "explain", "FILE", "--", "sh", "-c", "go vet && rm -rf /"},
			[]string{"sh -c 'go vet && rm -rf /'", "go vet", "rm -rf /", "denied by shell.deny[0]"}, "", 1},
		{"undecidable", []string{"policy", "explain", "FILE", "--", `eval "$X"`},
			[]string{"deny      shell  eval \"$X\"  cannot be decided before it runs: eval runs a string as shell code"}, "", 1},
		{"without --", []string{"policy", "explain", "FILE", "go", "build"}, []string{"allowed"}, "", 0},
		{"newlines are quoted", []string{"policy", "explain", "FILE", "--", "sh -c 'go test\ngo vet'"},
			[]string{`"sh -c 'go test\ngo vet'"`, "allowed"}, "", 0},
		{"does not parse", []string{"policy", "explain", "FILE", "--", "go test ("},
			[]string{"does not parse", "denied by shell"}, "", 1},
		{"empty script", []string{"policy", "explain", "FILE", "--", ""}, []string{"allowed by shell.allow_prefixes: no commands"}, "", 0},
		{"no command", []string{"policy", "explain", "FILE", "--"}, nil, "paddock: policy explain: no command given", cli.ExitUsage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := policyCLI(t, cliPolicy, append([]string(nil), tt.args...)...)
			if code != tt.code || !strings.HasPrefix(stderr, tt.stderr) {
				t.Errorf("exit %d stderr %q; want exit %d, stderr starting %q\nstdout:\n%s", code, stderr, tt.code, tt.stderr, stdout)
			}
			for _, line := range tt.stdout {
				if !strings.Contains(stdout, line) {
					t.Errorf("stdout lacks %q:\n%s", line, stdout)
				}
			}
		})
	}
	// An invalid policy cannot explain anything: that is paddock failing, not a denial.
	_, stderr, code := policyCLI(t, "shell: {deny: [\"a; b\"]}\n", "policy", "explain", "FILE", "--", "ls")
	if code != cli.ExitUsage || !strings.Contains(stderr, "FILE:1: shell.deny[0]") {
		t.Errorf("invalid policy: exit %d stderr %q", code, stderr)
	}
}
