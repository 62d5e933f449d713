// Package servercmd builds the paddock commands that link the control plane's packages
// (cli.HostedCommands): serve, admin, and the key rotations on the server host.
// paddock-server runs them, and every other command through package cli; paddock hands
// these to it, so that its own start does not pay for those packages' initialisers.
package servercmd

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock/internal/cli"
	_ "github.com/paddockhq/paddock/internal/runner/kubebackend" // paddock run on a cluster
)

// Main runs the whole CLI, the hosted commands in this process.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return cli.Run(args, stdin, stdout, stderr, Commands())
}

// Commands are the hosted commands by path.
func Commands() map[string]*cobra.Command {
	return map[string]*cobra.Command{
		"serve":                         newServeCommand(),
		"admin":                         newAdminCommand(),
		"secrets rotate-key":            newSecretsRotateKeyCommand(),
		"sandbox capability rotate-key": newCapabilityRotateKeyCommand(),
	}
}
