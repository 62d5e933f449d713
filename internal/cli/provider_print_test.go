package cli

import (
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
)

// On a terminal a step's command line carries a bar of the step's commands; elsewhere the
// line is plain, for logs and pipes.
func TestPrintProviderEventBar(t *testing.T) {
	ev := api.ProviderEvent{Type: api.EventProgress, Step: "validate", Command: "npm run test", Index: 2, Total: 3, State: "running"}
	for _, c := range []struct {
		tty  bool
		want string
	}{
		{false, "==> validate [2/3] npm run test\n"},
		{true, "==> [#>.] validate [2/3] npm run test\n"},
	} {
		var b strings.Builder
		printProviderEvent(&b, ev, c.tty)
		if b.String() != c.want {
			t.Errorf("tty %v: %q, want %q", c.tty, b.String(), c.want)
		}
	}
}
