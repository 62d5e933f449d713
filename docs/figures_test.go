package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// measured matches a measured figure: a time per operation, a rate, a ratio.
var measured = regexp.MustCompile(`\b[0-9]+(\.[0-9]+)? ?(ms|µs|ns|MB/s|GB/s|MiB/s|req/s)\b|[0-9](\.[0-9]+)?×([^0-9]|$)|[0-9](\.[0-9]+)?x (faster|slower)`)

// TestFiguresOnlyInBenchmarks keeps measured figures in benchmarks.md, which make bench
// rewrites: a figure copied into another page goes stale there. Pages link to its tables.
func TestFiguresOnlyInBenchmarks(t *testing.T) {
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join("..", "README.md"))
	for _, p := range pages {
		if p == "benchmarks.md" {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := measured.FindString(line); m != "" {
				t.Errorf("%s:%d: %q is a measured figure: put it in benchmarks.md and link its table", p, i+1, m)
			}
		}
	}
}
