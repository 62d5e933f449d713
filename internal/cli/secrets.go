package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

func newSecretsCommand() *cobra.Command {
	c := &cobra.Command{
		Use:     "secrets",
		Aliases: []string{"secret"},
		Short:   "your secrets on a paddock server (ls, set, rm); rotate-key on the server host",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return fmt.Errorf("secrets: give a subcommand (see paddock secrets --help): %w", errdefs.ErrInvalidArgument)
		},
	}
	c.AddCommand(newSecretsListCommand(), newSecretsSetCommand(), newSecretsRemoveCommand())
	return c
}

func newSecretsListCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "list your secrets (names and versions; values are never shown)",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				list, err := cl.ListSecrets(ctx)
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tVERSION\tUPDATED")
				for _, s := range list {
					fmt.Fprintf(tw, "%s\t%d\t%s ago\n", s.Name, s.Version, age(time.Since(s.UpdatedAt)))
				}
				return tw.Flush()
			})
		},
	}
}

func newSecretsSetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "set NAME",
		Short: "set a secret's value, read from stdin (never from the command line, which others can see)",
		Long: `set reads the value from stdin: on a terminal, one line typed without echo; from a
pipe or file, everything (up to 64 KiB), less one final line ending. Setting an existing
secret makes its next version.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if err := api.ValidateSecretName(args[0]); err != nil {
				return err
			}
			value, err := readSecretValue(c, args[0])
			if err != nil {
				return err
			}
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				s, err := cl.PutSecret(ctx, args[0], value)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "secret %s: version %d\n", s.Name, s.Version)
				return nil
			})
		},
	}
}

// readSecretValue reads a value from stdin: a line without echo from a terminal, the
// whole input from a pipe.
func readSecretValue(c *cobra.Command, name string) (string, error) {
	in := c.InOrStdin()
	fd, tty := terminal(in)
	var value string
	if tty {
		fmt.Fprintf(c.ErrOrStderr(), "Value of %s: ", name)
		restore, err := noEcho(fd)
		if err != nil {
			return "", fmt.Errorf("secrets set: turning the terminal's echo off: %w", err)
		}
		value, err = readLine(bufio.NewReader(in))
		restore()
		fmt.Fprintln(c.ErrOrStderr())
		if err != nil && !errors.Is(err, io.EOF) {
			return "", fmt.Errorf("secrets set: reading the value: %w", err)
		}
	} else {
		data, err := io.ReadAll(io.LimitReader(in, api.MaxSecretSize+3))
		if err != nil {
			return "", fmt.Errorf("secrets set: reading the value: %w", err)
		}
		value = strings.TrimSuffix(strings.TrimSuffix(string(data), "\n"), "\r")
	}
	switch {
	case value == "":
		return "", fmt.Errorf("secrets set %s: no value on stdin: %w", name, errdefs.ErrInvalidArgument)
	case len(value) > api.MaxSecretSize:
		return "", fmt.Errorf("secrets set %s: the value is over the limit of %d bytes (64 KiB): %w", name, api.MaxSecretSize, errdefs.ErrInvalidArgument)
	}
	return value, nil
}

func newSecretsRemoveCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME",
		Aliases: []string{"delete"},
		Short:   "delete a secret",
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				return cl.DeleteSecret(ctx, args[0])
			})
		},
	}
}
