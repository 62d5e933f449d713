package policy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
)

// example is the policy from the issue, with a deny list for hosts.
const example = `# policy.yaml
shell:
  deny: ["rm -rf /", "curl * | sh", "wget * | bash"]
  allow_prefixes: ["go", "npm run", "git status"]   # optional allow-list mode
files:
  jail: /workspace
  deny_write: [".git/hooks/**", ".env"]
  allowed_extensions: [".ts", ".tsx", ".css"]        # optional
  max_file_size: 100MB
network:
  default: deny            # or allow
  allow: ["registry.npmjs.org", "proxy.golang.org", "*.example.com"]
  deny: ["evil.example.com"]   # deny wins
resources:
  memory: 1GiB
  cpus: 2
  pids: 512
  timeout: 10m
  tmp: 256M
  file_size: 1MiB
  disk: 2G
`

func TestLoadExample(t *testing.T) {
	p := mustLoad(t, example)
	want := wire.Limits{Memory: 1 << 30, CPUs: 2, Pids: 512, Timeout: 10 * time.Minute, Tmp: 256 << 20, FileSize: 1 << 20, Disk: 2 << 30}
	if got := p.Resources(); got != want {
		t.Errorf("Resources() = %+v, want %+v", got, want)
	}
	if p.Jail() != "/workspace" || p.Source() != "policy.yaml" {
		t.Errorf("Jail() = %q, Source() = %q", p.Jail(), p.Source())
	}
	const summary = "shell: 3 deny patterns, 3 allowed prefixes; " +
		"files: jail /workspace, 2 deny_write patterns, extensions .ts .tsx .css, max file size 100MiB; " +
		"network: default deny, 3 allowed hosts, 1 denied host; " +
		"resources: memory 1GiB, cpus 2, pids 512, timeout 10m0s, tmp 256MiB, file_size 1MiB, disk 2GiB"
	if got := p.Summary(); got != summary {
		t.Errorf("Summary() =\n%s\nwant\n%s", got, summary)
	}
	if got := mustLoad(t, "").Summary(); got != "shell: no rules; files: no rules; network: default deny" {
		t.Errorf("empty policy: Summary() = %q", got)
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       string // the whole message after "policy.yaml"
	}{
		{"unknown top-level key", "shell: {}\nfile: {}\n", `:2: file: unknown field (the policy has shell, files, network, resources)`},
		{"unknown nested key", "shell:\n  deny: []\n  allow: []\n", `:3: shell.allow: unknown field (shell has deny, allow_prefixes, interactive, env)`},
		{"key twice", "network:\n  default: deny\n  default: allow\n", `:3: network.default: given twice`},
		{"not a mapping", "- a\n", `:1: want a mapping with keys shell, files, network, resources, got a list`},
		{"section not a mapping", "shell: [rm]\n", `:1: shell: want a mapping with keys deny, allow_prefixes, interactive, env, got a list`},
		{"list is a string", "shell:\n  deny: rm -rf /\n", `:2: shell.deny: want a list of strings, got the string "rm -rf /"`},
		{"item is a number", "network:\n  allow:\n    - example.com\n    - 42\n", `:4: network.allow[1]: want a string, got the number 42`},
		{"item is a mapping", "shell:\n  deny:\n    - {rm: x}\n", `:3: shell.deny[0]: want a string, got a mapping`},
		{"invalid glob", "files:\n  jail: /workspace\n  deny_write:\n    - .env\n    - a/**\n    - \"[\"\n", `:6: files.deny_write[2]: invalid glob "[": syntax error in pattern`},
		{"deny_write outside the jail", "files:\n  jail: /workspace\n  deny_write: [/etc/passwd]\n", `:3: files.deny_write[0]: "/etc/passwd" is outside the jail /workspace`},
		{"deny_write climbs out", "files:\n  jail: /workspace\n  deny_write: [\"a/../../x\"]\n", `:3: files.deny_write[0]: "a/../../x" climbs out of the jail with a ".." segment`},
		{"deny_write is the jail", "files:\n  jail: /workspace\n  deny_write: [./]\n", `names the jail itself`},
		{"jail missing", "files:\n  deny_write: [.env]\n", `:1: files.jail: required`},
		{"jail relative", "files:\n  jail: workspace\n", `:2: files.jail: "workspace" is not an absolute path`},
		{"extension without dot", "files:\n  jail: /w\n  allowed_extensions: [.ts, tsx]\n", `:3: files.allowed_extensions[1]: "tsx" must start with a dot`},
		{"extension glob", "files:\n  jail: /w\n  allowed_extensions: [\".*\"]\n", `must be a plain extension`},
		{"bad size", "files:\n  jail: /w\n  max_file_size: lots\n", `:3: files.max_file_size: "lots" is not a size`},
		{"zero size", "files:\n  jail: /w\n  max_file_size: 0\n", `:3: files.max_file_size: must be more than 0`},
		{"size is a list", "files:\n  jail: /w\n  max_file_size: [1]\n", `want a size like 512M or 1GiB, got a list`},
		{"bad default", "network:\n  default: block\n", `:2: network.default: "block": want allow or deny`},
		{"require_capability a string", "network:\n  default: deny\n  require_capability: \"yes\"\n", `:3: network.require_capability: want true or false, got the string "yes"`},
		{"require_capability a list", "network:\n  require_capability: [true]\n", `:2: network.require_capability: want true or false, got a list`},
		{"default allow with allow list", "network:\n  default: allow\n  allow:\n    - example.com\n", `:4: network.allow: with default: allow, an allow list decides nothing`},
		{"allow list then default allow", "network:\n  allow: [example.com]\n  default: allow\n", `:2: network.allow: with default: allow`},
		{"bare star host", "network:\n  allow: [\"*\"]\n", `network.allow[0]: "*": a bare * would match every host`},
		{"inner wildcard", "network:\n  allow: [\"a.*.com\"]\n", `only allowed as the whole first label`},
		{"host with port", "network:\n  allow: [\"example.com:443\"]\n", `want a bare host name`},
		{"cidr", "network:\n  deny: [\"10.0.0.0/8\"]\n", `address ranges are not supported`},
		{"wildcard address", "network:\n  deny: [\"*.10.0.0.1\"]\n", `a wildcard cannot apply to an address`},
		{"bad deny pattern", "shell:\n  deny: [\"rm -rf / &&\"]\n", `:2: shell.deny[0]: "rm -rf / &&": does not parse as shell`},
		{"list pattern", "shell:\n  deny: [\"a; b\"]\n", `want one command or one pipeline`},
		{"and pattern", "shell:\n  deny: [\"a && b\"]\n", `not a list with &&`},
		{"variable in pattern", "shell:\n  deny: [\"rm $X\"]\n", `words must be literal`},
		{"glob name", "shell:\n  deny: [\"r* -rf /\"]\n", `the program name "r*" must be a literal name`},
		{"redirect in pattern", "shell:\n  deny: [\"curl > f\"]\n", `redirections`},
		{"empty pattern", "shell:\n  deny: [\"  \"]\n", `empty pattern`},
		{"compound pattern", "shell:\n  deny: [\"if a; then b; fi\"]\n", `compound command`},
		{"pipeline prefix", "shell:\n  allow_prefixes: [\"go | sh\"]\n", `:2: shell.allow_prefixes[0]: "go | sh": want the first words of one command`},
		{"glob prefix", "shell:\n  allow_prefixes: [\"go t*\"]\n", `prefixes are literal words`},
		{"memory too small", "resources:\n  memory: 1k\n", `:2: resources.memory: 1KiB is below the 4MiB`},
		{"memory not a size", "resources:\n  memory: 1 gig\n", `:2: resources.memory: "1 gig" is not a size`},
		{"cpus a string", "resources:\n  cpus: two\n", `:2: resources.cpus: want a number of CPUs like 2 or 0.5, got the string "two"`},
		{"cpus zero", "resources:\n  cpus: 0\n", `resources.cpus: 0 is not a number of CPUs`},
		{"cpus nan", "resources:\n  cpus: .nan\n", `resources.cpus: .nan is not a number of CPUs`},
		{"pids fractional", "resources:\n  pids: 1.5\n", `:2: resources.pids: want a whole number`},
		{"pids few", "resources:\n  pids: 2\n", `resources.pids: 2 is too few`},
		{"timeout without unit", "resources:\n  timeout: 10\n", `:2: resources.timeout: want a duration with a unit like 30s or 10m, got the number 10`},
		{"timeout bad", "resources:\n  timeout: soon\n", `:2: resources.timeout: "soon" is not a positive duration`},
		{"timeout negative", "resources:\n  timeout: -1m\n", `is not a positive duration`},
		{"tmp not a size", "resources:\n  memory: 1G\n  tmp: lots\n", `:3: resources.tmp: "lots" is not a size`},
		{"tmp zero", "resources:\n  tmp: 0\n", `:2: resources.tmp: 0B would make /tmp unlimited`},
		{"disk zero", "resources:\n  disk: 0\n", `:2: resources.disk: 0B would leave no room`},
		{"disk not a size", "resources:\n  disk: big\n", `:2: resources.disk: "big" is not a size`},
		{"tmp a list", "resources:\n  tmp: [1M]\n", `:2: resources.tmp: want a single value, got a list`},
		{"file_size negative", "resources:\n  file_size: -1\n", `:2: resources.file_size: "-1" is not a size`},
		{"file_size zero", "resources:\n  file_size: 0k\n", `:2: resources.file_size: 0B would forbid writing any file`},
		{"file_size a bool", "resources:\n  file_size: true\n", `:2: resources.file_size: want a size like 512M or 1GiB, got`},
		{"file_size too large", "resources:\n  file_size: 9000000T\n", `:2: resources.file_size: size "9000000T" is too large`},
		{"yaml syntax", "shell:\n  deny: [\"rm\"\nfiles: {}\n", `not valid YAML`},
		{"tab indentation", "shell:\n\tdeny: []\n", `:2: not valid YAML: found character that cannot start any token`},
		{"two documents", "shell: {}\n---\nfiles: {}\n", `more than one YAML document`},
		{"alias", "network:\n  allow: &h [example.com]\n  deny: *h\n", `:3: YAML aliases (*h) are not allowed`},
		{"merge key", "shell: &s {deny: [rm]}\nfiles:\n  <<: *s\n", `YAML aliases`},
		{"NUL in a string", "files:\n  jail: \"/w\\0x\"\n", `:2: files.jail: contains a NUL byte`},
		{"non-string key", "shell:\n  [a]: b\n", `:2: shell: a key in shell is a list`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load([]byte(tt.yaml), "policy.yaml")
			var le *LoadError
			if !errors.As(err, &le) || !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("Load: %v; want a *LoadError that is an invalid argument", err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "policy.yaml") || !strings.Contains(msg, tt.want) {
				t.Errorf("Load: %s\nwant policy.yaml…%s", msg, tt.want)
			}
			if strings.Count(msg, "\n") > 0 {
				t.Errorf("Load: message on more than one line: %q", msg)
			}
		})
	}
}

// Deny entries that repeat allow entries are fine: deny wins, and that is documented.
func TestLoadAcceptsOverlaps(t *testing.T) {
	p := mustLoad(t, `
network:
  default: deny
  allow: [example.com, "*.example.com"]
  deny: [example.com]
shell:
  deny: [go]
  allow_prefixes: [go]
`)
	if d := p.Host("example.com"); d.Allow || d.Rule != "network.deny[0]" {
		t.Errorf("Host = %v", d)
	}
	if d := p.ShellScript("go test"); d.Allow || d.Rule != "shell.deny[0]" {
		t.Errorf("ShellScript = %v", d)
	}
}

func TestLoadLimits(t *testing.T) {
	big := make([]byte, MaxFileSize+1)
	for i := range big {
		big[i] = '#'
	}
	if _, err := Load(big, "big.yaml"); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("Load(big) = %v", err)
	}
	deep := strings.Repeat("[", 100) + strings.Repeat("]", 100)
	if _, err := Load([]byte("shell: "+deep), "deep.yaml"); err == nil {
		t.Errorf("Load(deep) succeeded")
	}
	if _, err := Load([]byte("shell: {}"), ""); err != nil {
		t.Errorf("Load without a source: %v", err)
	}
	var le *LoadError
	if _, err := Load([]byte("x: 1"), ""); !errors.As(err, &le) || le.Source != "policy" || le.Line != 1 || le.Field != "x" {
		t.Errorf("Load without a source: %#v", err)
	}
}
