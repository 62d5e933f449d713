package servercmd

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/secrets"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/store"
)

// newCapabilityRotateKeyCommand is paddock sandbox capability rotate-key, on the server host.
func newCapabilityRotateKeyCommand() *cobra.Command {
	var dataDir, config string
	c := &cobra.Command{
		Use:   "rotate-key",
		Short: "on the server host: add a new capability signing key and make it primary",
		Long: `rotate-key adds a key to the server's capability keyring (capability.keys in its data
directory, same --data and --config as paddock serve) and makes it primary. Send
paddock serve SIGHUP (or restart it) to sign new tokens with it. Tokens minted before
still verify, and running sandboxes keep working: their agents' tokens are signed under
the keyring's oldest key, which they hold.

After a key leaked, rotate, then delete the leaked key's "key N" line from the file and
reload: tokens signed under it stop verifying, and sandboxes started before the key that
is then the oldest was added must be restarted.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			cfg, err := server.LoadConfig(config, dataDir, "")
			if err != nil {
				return err
			}
			rot, err := server.RotateCapabilityKeys(cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "Added capability key %d to %s and made it primary (was %d); keys %s stay for the tokens signed under them.\nSend paddock serve SIGHUP (or restart it) to sign new tokens with it.\n",
				rot.To, rot.File, rot.From, strings.Trim(fmt.Sprint(rot.Kept), "[]"))
			return nil
		},
	}
	c.Flags().StringVar(&dataDir, "data", "", "the server's data directory (default: as paddock serve)")
	c.Flags().StringVar(&config, "config", "", "the server's YAML configuration file")
	return c
}

// newSecretsRotateKeyCommand is paddock secrets rotate-key, on the server host.
func newSecretsRotateKeyCommand() *cobra.Command {
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
