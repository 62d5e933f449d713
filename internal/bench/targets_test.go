package bench

import (
	"strings"
	"testing"
)

// TestRelTarget: a target relative to a reference measured in the same run can fail, in
// either direction, and is not judged when the reference was not measured.
func TestRelTarget(t *testing.T) {
	for _, c := range []struct {
		name       string
		r          rel
		v, ref     float64
		missing    string
		target     string
		met, ratio string
	}{
		{"at most, met", atMost(0.25, "runc exec"), 2.5, 10, "", "≤ 0.25× runc exec", "yes", "0.25×"},
		{"at most, not met", atMost(0.25, "runc exec"), 2.6, 10, "", "≤ 0.25× runc exec", "**no**", "0.26×"},
		{"at least, met", atLeast(0.5, "the relay floor"), 500, 1000, "", "≥ 0.5× the relay floor", "yes", "0.50×"},
		{"at least, not met", atLeast(0.5, "the relay floor"), 499, 1000, "", "≥ 0.5× the relay floor", "**no**", "0.50×"},
		{"reference not measured", atMost(2, "podman"), 1, 0, "podman is not installed", "≤ 2× podman", "—", ""},
		{"reference measured nothing", atMost(2, "podman"), 1, 0, "", "≤ 2× podman", "—", "—"},
	} {
		t.Run(c.name, func(t *testing.T) {
			row := c.r.row(Row{Summary: Summary{P50: c.v}}, c.ref, c.missing)
			if row.Target != c.target || row.Met != c.met || row.Ratio != c.ratio {
				t.Errorf("target %q met %q ratio %q, want %q %q %q", row.Target, row.Met, row.Ratio, c.target, c.met, c.ratio)
			}
			if w := c.r.word(c.v, c.ref, c.missing); (c.met == "—") != strings.Contains(w, "not judged") {
				t.Errorf("word %q for met %q", w, c.met)
			}
		})
	}
}
