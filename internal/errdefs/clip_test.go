package errdefs_test

import (
	"testing"
	"unicode/utf8"

	"github.com/paddockhq/paddock/internal/errdefs"
)

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		max      int
		want     string
	}{
		{"short", "abc", 5, "abc"},
		{"exact", "abcde", 5, "abcde"},
		{"long", "abcdefgh", 5, "abcde…"},
		{"cut inside a rune", "abcdé", 5, "abcd…"},
		{"invalid bytes", "ab\xffcdefgh", 5, "abcd…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := errdefs.Clip(tc.in, tc.max)
			if got != tc.want || !utf8.ValidString(got) && len(tc.in) > tc.max {
				t.Fatalf("Clip(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
			}
		})
	}
}
