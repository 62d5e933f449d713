package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// ServerProgram runs the hosted commands. It is built beside paddock (make build) and
// links the control plane's packages (the server, its database drivers, client-go, the
// S3 client), whose initialisers would otherwise run at every start of paddock.
const ServerProgram = "paddock-server"

// Hosted is a command that ServerProgram runs.
type Hosted struct {
	// Path is its command path below paddock.
	Path  string
	Short string
}

// HostedCommands are ServerProgram's commands (package cli/servercmd builds them).
var HostedCommands = []Hosted{
	{"serve", "run the control plane: accounts, sandboxes, the live/dev proxy, the API"},
	{"admin", "on the server host: back up the control plane, restore it onto a new machine"},
	{"secrets rotate-key", "on the server host: make a new secrets key primary and re-encrypt every secret under it"},
	{"sandbox capability rotate-key", "on the server host: add a new capability signing key and make it primary"},
}

// addHosted adds each hosted command below root: the one hosted builds, or one that
// hands the whole command line to ServerProgram.
func addHosted(root *cobra.Command, hosted map[string]*cobra.Command, toServer func(*cobra.Command) error) {
	for _, h := range HostedCommands {
		words := strings.Fields(h.Path)
		parent, _, err := root.Find(words[:len(words)-1])
		if err != nil {
			panic(fmt.Sprintf("hosted command %q: %v", h.Path, err))
		}
		if c := hosted[h.Path]; c != nil {
			parent.AddCommand(c)
			continue
		}
		parent.AddCommand(&cobra.Command{
			Use: words[len(words)-1], Short: h.Short,
			// Its flags and --help are ServerProgram's.
			DisableFlagParsing: true,
			RunE:               func(c *cobra.Command, _ []string) error { return toServer(c) },
		})
	}
}

// execServer replaces this process by ServerProgram, beside it, with the same arguments.
// It needs this process's own stdio, which the new program inherits.
func execServer(c *cobra.Command, args []string) error {
	if c.InOrStdin() != os.Stdin || c.OutOrStdout() != os.Stdout || c.ErrOrStderr() != os.Stderr {
		return fmt.Errorf("%s runs in %s, which needs this process's own stdin, stdout and stderr: %w", c.CommandPath(), ServerProgram, errdefs.ErrFailedPrecondition)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("%s runs in %s, beside paddock: %v: %w", c.CommandPath(), ServerProgram, err, errdefs.ErrUnavailable)
	}
	path := filepath.Join(filepath.Dir(exe), ServerProgram)
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("%s runs in %s, which is not beside %s (make build builds both): %w", c.CommandPath(), ServerProgram, exe, errdefs.ErrUnavailable)
	}
	err = syscall.Exec(path, append([]string{path}, args...), os.Environ())
	return fmt.Errorf("%s: starting %s: %v: %w", c.CommandPath(), path, err, errdefs.ErrUnavailable)
}
