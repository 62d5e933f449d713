package docs

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/cli/servercmd"
)

// TestCommands checks every `paddock …` command line in the pages (sh blocks and code
// spans) against the CLI itself: each subcommand exists, and each flag is one that subcommand's --help lists.
func TestCommands(t *testing.T) {
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join("..", "README.md"))
	n := 0
	for _, p := range pages {
		for _, c := range commandLines(t, p) {
			n++
			if err := checkCommand(c.args); err != "" {
				t.Errorf("%s:%d: paddock %s: %s", p, c.line, strings.Join(c.args, " "), err)
			}
		}
	}
	if n == 0 {
		t.Fatal("no paddock command found in the pages")
	}
}

type commandLine struct {
	args []string
	line int
}

// invocation finds `paddock` (or `bin/paddock`, `scripts/paddock`) as a command: at the start, or after a
// pipe, `$(`, `;`, `&&` or an environment assignment.
var invocation = regexp.MustCompile(`(?:^|[|;(&]\s*|^[A-Z_]+=\S+\s+|\s[A-Z_]+=\S+\s+)(?:bin/|scripts/)?paddock\s+([^|;)]*)`)

// inline finds a code span that is a paddock command line.
var inline = regexp.MustCompile("`(?:bin/|scripts/)?paddock ([^`]*)`")

// commandLines reads the paddock command lines of a page's sh blocks (comments dropped)
// and of its code spans.
func commandLines(t *testing.T, path string) []commandLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []commandLine
	inSh := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if fence := strings.TrimSpace(line); strings.HasPrefix(fence, "```") {
			inSh = !inSh && (fence == "```sh" || fence == "```bash")
			continue
		}
		if !inSh {
			for _, m := range inline.FindAllStringSubmatch(line, -1) {
				out = append(out, commandLine{args: strings.Fields(m[1]), line: n})
			}
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		for _, m := range invocation.FindAllStringSubmatch(line, -1) {
			out = append(out, commandLine{args: strings.Fields(m[1]), line: n})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkCommand walks args down the CLI's subcommands, then checks the flags before "--"
// against the deepest subcommand's help; it returns what is wrong, or "".
func checkCommand(args []string) string {
	var path []string
	help := helpOf(nil)
	for _, a := range args {
		if !subcommands(help)[a] {
			break
		}
		path = append(path, a)
		help = helpOf(path)
	}
	if len(path) == 0 {
		return "no such command"
	}
	rest := args[len(path):]
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") && len(subcommands(help)) > 0 && takesNoArgs(help, path) {
		return "paddock " + strings.Join(path, " ") + " has no subcommand " + rest[0]
	}
	flags := flagsOf(help)
	for _, a := range rest {
		if a == "--" {
			break
		}
		if a = strings.TrimPrefix(a, "["); !strings.HasPrefix(a, "-") || a == "-" {
			continue
		}
		name, _, _ := strings.Cut(strings.Trim(a, "[]"), "=")
		if !flags[name] {
			return "flag " + name + " is not in paddock " + strings.Join(path, " ") + " --help"
		}
	}
	return ""
}

func helpOf(path []string) string {
	var out bytes.Buffer
	servercmd.Main(append(append([]string{}, path...), "--help"), strings.NewReader(""), &out, &out)
	return out.String()
}

// subcommands lists the names and aliases under "Available Commands:" in help.
func subcommands(help string) map[string]bool {
	out := map[string]bool{}
	_, rest, ok := strings.Cut(help, "Available Commands:\n")
	if !ok {
		return out
	}
	for line := range strings.SplitSeq(rest, "\n") {
		if !strings.HasPrefix(line, "  ") {
			break
		}
		out[strings.Fields(line)[0]] = true
	}
	return out
}

// takesNoArgs says whether help's first usage line is "paddock PATH [flags]": a command
// that is only a group of subcommands.
func takesNoArgs(help string, path []string) bool {
	_, usage, _ := strings.Cut(help, "Usage:\n")
	first, _, _ := strings.Cut(usage, "\n")
	return strings.TrimSpace(first) == "paddock "+strings.Join(path, " ")+" [flags]"
}

var flagRE = regexp.MustCompile(`(?m)^\s+(?:(-[a-zA-Z]), )?(--[a-z][a-z0-9-]*)`)

// flagsOf lists the flags help shows, long and short.
func flagsOf(help string) map[string]bool {
	out := map[string]bool{}
	for _, m := range flagRE.FindAllStringSubmatch(help, -1) {
		out[m[2]] = true
		if m[1] != "" {
			out[m[1]] = true
		}
	}
	return out
}
