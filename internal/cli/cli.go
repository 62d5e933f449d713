// Package cli is the paddock command line. It maps errors to exit codes and one-line
// messages once, here: a user mistake never shows a Go stack trace.
package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// ExitUsage is the exit status when paddock itself could not run the command: a bad flag,
// a missing runtime, a sandbox that would not start.
const ExitUsage = 125

// Main runs the CLI with args and returns the process's exit status. The hosted commands
// (hosted.go) run in paddock-server, beside this program.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return Run(args, stdin, stdout, stderr, nil)
}

// Run is Main with the hosted commands built in, by path ("serve", "secrets
// rotate-key"), as paddock-server runs them (package cli/servercmd). A hosted command
// missing from hosted is handed to paddock-server.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer, hosted map[string]*cobra.Command) int {
	var code int
	root := &cobra.Command{
		Use:           "paddock",
		Short:         "paddock runs AI agents' commands in sandboxes they cannot escape",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%s: %v (see %s --help): %w", c.CommandPath(), err, c.CommandPath(), errdefs.ErrInvalidArgument)
	})
	toServer := func(c *cobra.Command) error { return execServer(c, args) }
	root.AddCommand(newRunCommand(&code, toServer), newVersionCommand(),
		newLoginCommand(), newLogoutCommand(), newSandboxCommand(&code), newRolesCommand(), newPromoteCommand(), newSecretsCommand(), newPolicyCommand(&code),
		newTokenCommand(), newInviteCommand(), newAgentCommand(&code), newAppCommand(), newMCPCommand(), newBackupCommand(), newKeptCommand())
	root.AddCommand(newHistoryCommands()...)
	addHosted(root, hosted, toServer)
	if err := root.Execute(); err != nil {
		fmt.Fprintf(stderr, "paddock: %s\n", message(err))
		return ExitUsage
	}
	return code
}

// message is an error as one line for a user: the taxonomy suffix that %w left at the end
// ("…: invalid argument") is dropped, since the text before it already says what happened.
//
// A server's "not found" and "already exists" (*paddock.Error) are the exception: they
// are the message's point ("sandbox sb-…", `mkdir "src"`), as the server keeps them, so
// the words are put back. A 401 says how to sign in.
func message(err error) string {
	msg := err.Error()
	for _, kind := range []error{errdefs.ErrInvalidArgument, errdefs.ErrNotFound, errdefs.ErrUnavailable, errdefs.ErrPermissionDenied, errdefs.ErrLimitExceeded, errdefs.ErrFailedPrecondition, errdefs.ErrAlreadyExists, errdefs.ErrUnauthenticated, errdefs.ErrDeadlineExceeded, errdefs.ErrDataLoss} {
		if errors.Is(err, kind) {
			msg = strings.TrimSuffix(msg, ": "+kind.Error())
		}
	}
	var serverErr *paddock.Error
	if errors.As(err, &serverErr) {
		for _, kind := range []error{errdefs.ErrNotFound, errdefs.ErrAlreadyExists} {
			if errors.Is(err, kind) && !strings.Contains(msg, kind.Error()) {
				msg += ": " + kind.Error()
			}
		}
	}
	var lf loginFailed
	if errors.Is(err, errdefs.ErrUnauthenticated) && !errors.As(err, &lf) && !strings.Contains(msg, "paddock login") {
		msg += "; run paddock login"
	}
	if strings.HasPrefix(msg, "unknown command") || strings.HasPrefix(msg, "unknown flag") {
		msg += " (see paddock --help)"
	}
	return strings.ReplaceAll(msg, "\n", " ")
}

// Version is paddock's version, set at build time.
var Version = "dev"

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print paddock's version",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			fmt.Fprintf(c.OutOrStdout(), "paddock %s\n", Version)
			return nil
		},
	}
}
