package servercmd_test

import (
	"testing"

	"github.com/paddockhq/paddock/internal/cli"
	"github.com/paddockhq/paddock/internal/cli/servercmd"
)

// paddock lists each hosted command as paddock-server builds it.
func TestHostedCommands(t *testing.T) {
	cmds := servercmd.Commands()
	if len(cmds) != len(cli.HostedCommands) {
		t.Errorf("paddock-server builds %d hosted commands; cli.HostedCommands lists %d", len(cmds), len(cli.HostedCommands))
	}
	for _, h := range cli.HostedCommands {
		c := cmds[h.Path]
		switch {
		case c == nil:
			t.Errorf("%s: listed in cli.HostedCommands, not built by servercmd", h.Path)
		case c.Short != h.Short:
			t.Errorf("%s: paddock says %q, paddock-server %q", h.Path, h.Short, c.Short)
		}
	}
}
