package egress

import (
	"strings"
	"testing"
)

// A refusal's reason phrase holds only what a status line may: printable ASCII, bounded.
func TestReasonPhrase(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"Forbidden by paddock egress: host a.test is not allowed (rule network.default)", "Forbidden by paddock egress: host a.test is not allowed (rule network.default)"},
		{"bad\r\nInjected: 1\x00é", "bad??Injected: 1???"},
	} {
		if got := reasonPhrase(c.in); got != c.want {
			t.Errorf("reasonPhrase(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := reasonPhrase(strings.Repeat("x", 1000)); len(got) != maxReasonPhrase || !strings.HasSuffix(got, "...") {
		t.Errorf("a long reason: %d bytes", len(got))
	}
}
