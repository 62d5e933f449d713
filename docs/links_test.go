package docs

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// pending are pages other branches add; a link to one may lead nowhere until they land.
// Once a page exists its links are checked like any other.
var pending = map[string]bool{
	"sdk-go.md":  true,
	"desktop.md": true,
}

// TestLinks checks every relative link of README.md and docs/*.md: the file it names
// exists, and the heading its #anchor names is in that file (or in the page itself).
func TestLinks(t *testing.T) {
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join("..", "README.md"))
	anchors := map[string]map[string]bool{}
	for _, p := range pages {
		links, heads := scan(t, p)
		anchors[filepath.Clean(p)] = heads
		for _, l := range links {
			if err := check(p, l, anchors); err != nil {
				t.Errorf("%s:%d: link %q: %v", p, l.line, l.target, err)
			}
		}
	}
}

type link struct {
	target string
	line   int
}

// check resolves l, a link in page, reading the page it leads to when not yet read.
func check(page string, l link, anchors map[string]map[string]bool) error {
	file, anchor, _ := strings.Cut(l.target, "#")
	path := filepath.Clean(page)
	if file != "" {
		path = filepath.Clean(filepath.Join(filepath.Dir(page), file))
		if _, err := os.Stat(path); err != nil {
			if dir := filepath.Dir(path); pending[filepath.Base(path)] && (dir == "." || dir == filepath.Join("..", "docs")) {
				return nil
			}
			return fmt.Errorf("no file %s", path)
		}
	}
	if anchor == "" {
		return nil
	}
	if !strings.HasSuffix(path, ".md") {
		return fmt.Errorf("an anchor into %s, which is no page", path)
	}
	heads, ok := anchors[path]
	if !ok {
		var err error
		if heads, err = headings(path); err != nil {
			return err
		}
		anchors[path] = heads
	}
	if !heads[anchor] {
		return fmt.Errorf("%s has no heading #%s", path, anchor)
	}
	return nil
}

var (
	linkRE = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	codeRE = regexp.MustCompile("`[^`]*`")
)

// scan reads a page's relative links (outside code) and its headings' anchors.
func scan(t *testing.T, path string) ([]link, map[string]bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var links []link
	heads := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if strings.HasPrefix(line, "#") {
			heads[slug(line, seen)] = true
		}
		for _, m := range linkRE.FindAllStringSubmatch(codeRE.ReplaceAllString(line, ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links = append(links, link{target: target, line: n})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return links, heads
}

// headings reads the anchors of a page that is not checked itself (one outside docs/).
func headings(path string) (map[string]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	heads := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(line, "#") {
			heads[slug(line, seen)] = true
		}
	}
	return heads, nil
}

// slug is a heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces
// as hyphens, "-1", "-2", … after a repeat.
func slug(heading string, seen map[string]int) string {
	text := strings.TrimSpace(strings.TrimLeft(heading, "#"))
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	s := b.String()
	if n := seen[s]; n > 0 {
		seen[s] = n + 1
		return fmt.Sprintf("%s-%d", s, n)
	}
	seen[s] = 1
	return s
}
