package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/policy"
)

// newSandboxPolicyCommand is paddock sandbox policy set|get|rm.
func newSandboxPolicyCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "policy",
		Short: "attach, show or detach a sandbox's policy (what its exec and file API may do)",
		Long: `A sandbox's policy (a policy file: see paddock policy check) is enforced by the server on
every exec and file operation of the API, before it reaches the sandbox. The policy in
force is the sandbox's own, else its owner's (set by the operator), else the server's
default, else none (everything is allowed); the first that exists is the whole policy.
While the owner's or the default policy applies, only an admin may set or remove a
sandbox's own policy (it would replace the operator's).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return fmt.Errorf("sandbox policy: give a subcommand: set, get or rm: %w", errdefs.ErrInvalidArgument)
		},
	}
	c.AddCommand(newSandboxPolicySetCommand(), newSandboxPolicyGetCommand(), newSandboxPolicyRemoveCommand())
	return c
}

func newSandboxPolicySetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "set ID FILE",
		Short: "attach the policy in FILE (\"-\" for standard input) to a sandbox",
		Long: `set checks FILE as paddock policy check does, then attaches it to the sandbox: it is in
force for the next exec or file operation. A policy with a mistake is refused (here or by
the server) with its line and field, and the sandbox keeps the policy it had.`,
		Args: exactArgs(2, "ID FILE"),
		RunE: func(c *cobra.Command, args []string) error {
			text, err := readPolicyFile(c, args[1])
			if err != nil {
				return err
			}
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				p, err := cl.Sandbox(args[0]).SetPolicy(ctx, text)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "%s: policy attached\n%s\n", args[0], p.Summary)
				return nil
			})
		},
	}
}

func newSandboxPolicyGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "print the policy in force for a sandbox, and where it comes from",
		Long: `get prints the policy file in force for the sandbox, after comment lines that say where it
comes from (the sandbox's own, its owner's, the server's default, or none), so that the
output can be edited and given back to set.`,
		Args: exactArgs(1, "ID"),
		RunE: func(c *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				p, err := cl.Sandbox(args[0]).Policy(ctx)
				if err != nil {
					return err
				}
				printSandboxPolicy(c.OutOrStdout(), p)
				return nil
			})
		},
	}
}

func printSandboxPolicy(w io.Writer, p api.SandboxPolicy) {
	switch p.Source {
	case api.PolicyNone:
		fmt.Fprintf(w, "# %s: no policy is in force: every command and file operation is allowed\n", p.Sandbox)
		return
	case api.PolicySandbox:
		when := ""
		if p.UpdatedAt != nil {
			when = ", attached " + p.UpdatedAt.Local().Format(time.DateTime)
		}
		fmt.Fprintf(w, "# %s: the sandbox's own policy%s\n", p.Sandbox, when)
	case api.PolicyUser:
		fmt.Fprintf(w, "# %s: its owner's policy (no policy of its own)\n", p.Sandbox)
	default:
		fmt.Fprintf(w, "# %s: the server's default policy (no policy of its own or its owner's)\n", p.Sandbox)
	}
	fmt.Fprintf(w, "# %s\n%s", p.Summary, p.Policy)
	if !strings.HasSuffix(p.Policy, "\n") {
		fmt.Fprintln(w)
	}
}

func newSandboxPolicyRemoveCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "rm ID",
		Aliases: []string{"delete", "detach"},
		Short:   "detach a sandbox's own policy (its owner's or the default is then in force)",
		Args:    exactArgs(1, "ID"),
		RunE: func(c *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				if err := cl.Sandbox(args[0]).DeletePolicy(ctx); err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "%s: policy detached\n", args[0])
				return nil
			})
		},
	}
}

// readPolicyFile reads a policy file ("-": standard input) and checks that it loads, so
// that a mistake names the file the user gave.
func readPolicyFile(c *cobra.Command, file string) ([]byte, error) {
	data, source, err := readPolicyData(c, file)
	if err != nil {
		return nil, err
	}
	if _, err := policy.Load(data, source); err != nil {
		return nil, err
	}
	return data, nil
}
