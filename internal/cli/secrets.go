package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/secrets"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/store"
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
	c.AddCommand(newSecretsListCommand(), newSecretsSetCommand(), newSecretsRemoveCommand(), newRotateKeyCommand())
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
			if err := secrets.ValidateName(args[0]); err != nil {
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
		data, err := io.ReadAll(io.LimitReader(in, secrets.MaxValueSize+3))
		if err != nil {
			return "", fmt.Errorf("secrets set: reading the value: %w", err)
		}
		value = strings.TrimSuffix(strings.TrimSuffix(string(data), "\n"), "\r")
	}
	switch {
	case value == "":
		return "", fmt.Errorf("secrets set %s: no value on stdin: %w", name, errdefs.ErrInvalidArgument)
	case len(value) > secrets.MaxValueSize:
		return "", fmt.Errorf("secrets set %s: the value is over the limit of %d bytes (64 KiB): %w", name, secrets.MaxValueSize, errdefs.ErrInvalidArgument)
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

func newRotateKeyCommand() *cobra.Command {
	var dataDir, config string
	c := &cobra.Command{
		Use:   "rotate-key",
		Short: "on the server host: make a new secrets key primary and re-encrypt every secret under it",
		Long: `rotate-key opens the server's database and secrets key file directly, as paddock serve
does (same --data and --config), adds a new key version to the key file, makes it
primary and re-encrypts every user's secret under it in one transaction. It may run while
paddock serve runs: the server reads the new key when it meets it.

Older key versions stay in the key file, because database backups from before the
rotation still need them; delete a "key N" line only when no backup you might restore
uses it. A key given in PADDOCK_SECRETS_KEY cannot be rotated: move it to a key file.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			cfg, err := server.LoadConfig(config, dataDir, "")
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log := slog.New(slog.NewTextHandler(c.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			return rotateKey(ctx, c, cfg, log)
		},
	}
	c.Flags().StringVar(&dataDir, "data", "", "the server's data directory (default: as paddock serve)")
	c.Flags().StringVar(&config, "config", "", "the server's YAML configuration file")
	return c
}

func rotateKey(ctx context.Context, c *cobra.Command, cfg server.Config, log *slog.Logger) error {
	path := server.StoreTarget(cfg)
	if cfg.Store == "" {
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("secrets rotate-key: no paddock database at %s: give the server's --data or --config: %w", path, errdefs.ErrNotFound)
		}
	}
	st, err := store.Open(ctx, path)
	if err != nil {
		return err
	}
	defer st.Close()
	sec, err := secrets.Open(ctx, st, server.SecretsKeySource(cfg), log)
	if err != nil {
		return err
	}
	rot, err := sec.RotateKey(ctx)
	if err != nil {
		return err
	}
	out := c.OutOrStdout()
	fmt.Fprintf(out, "Rotated the secrets key in %s: version %d -> %d, now primary. Re-encrypted %d secrets under version %d.\n",
		rot.KeyFile, rot.From, rot.To, rot.Reencrypted, rot.To)
	if len(rot.Retained) > 0 {
		fmt.Fprintf(out, "The key file keeps versions %v for database backups from before this rotation: delete a \"key N\" line only when no backup you might restore needs it.\n",
			strings.Trim(fmt.Sprint(rot.Retained), "[]"))
	}
	return nil
}
