package servercmd

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock/internal/cli"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/server"
)

func newAdminCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "admin",
		Short: "on the server host: back up the control plane, restore it onto a new machine",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return fmt.Errorf("admin: give a subcommand (see paddock admin --help): %w", errdefs.ErrInvalidArgument)
		},
	}
	c.AddCommand(newAdminBackupCommand(), newAdminRestoreCommand())
	return c
}

// serverFlags are the flags that find a server's configuration as paddock serve does.
type serverFlags struct{ dataDir, config, store string }

func (f *serverFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&f.dataDir, "data", "", "the server's data directory (default: as paddock serve)")
	c.Flags().StringVar(&f.config, "config", "", "the server's YAML configuration file")
	c.Flags().StringVar(&f.store, "store", "", "the server's database, a postgres:// URL, as given to paddock serve --store")
}

func (f *serverFlags) load() (server.Config, error) {
	cfg, err := server.LoadConfig(f.config, f.dataDir, "")
	if err != nil {
		return cfg, err
	}
	if f.store != "" {
		if err := server.CheckStore(f.store); err != nil {
			return cfg, fmt.Errorf("--store: %w", err)
		}
		cfg.Store = f.store
	}
	return cfg, nil
}

func newAdminBackupCommand() *cobra.Command {
	var sf serverFlags
	var keys string
	c := &cobra.Command{
		Use:   "backup DIR",
		Short: "write a consistent copy of the control plane's database and configuration into DIR, while it serves",
		Long: `backup writes into DIR (new or empty) a consistent copy of the database (SQLite: VACUUM
INTO, one read transaction; PostgreSQL: pg_dump), the configuration file and the files it
names, the per-user settings, and manifest.json with every file's SHA-256.

The key files (the secrets keyring, the capability keyring, the apps hosts' sign-ins) are
not written into DIR: whoever holds them and the database reads every user's secret. The
manifest lists them; --keys KEYDIR copies them into KEYDIR, which must be apart from DIR.
Workspaces and artifacts are not copied: the manifest says where they are.
See docs/operations.md to restore onto a new machine.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cfg, err := sf.load()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			m, err := server.Backup(ctx, cfg, server.BackupOptions{Dir: args[0], KeysDir: keys, ConfigFile: sf.config, Version: cli.Version})
			if err != nil {
				return err
			}
			out := c.OutOrStdout()
			fmt.Fprintf(out, "Backed up the %s database (%d bytes) and %d files into %s.\n", m.Database.Backend, m.Database.Size, len(m.Files), args[0])
			if keys != "" {
				fmt.Fprintf(out, "Copied the key files into %s; keep it apart from the backup:\n", keys)
			} else {
				fmt.Fprintln(out, "Keep these key files apart from the backup (back them up on their own):")
			}
			for _, f := range m.KeepApart {
				fmt.Fprintf(out, "  %s  %s\n", f.From, f.What)
			}
			fmt.Fprintln(out, "Not copied, back up on their own:")
			for _, p := range m.Elsewhere {
				fmt.Fprintf(out, "  %s  %s: %s\n", p.Path, p.What, p.How)
			}
			return nil
		},
	}
	sf.add(c)
	c.Flags().StringVar(&keys, "keys", "", "also copy the key files into this directory (apart from DIR)")
	return c
}

func newAdminRestoreCommand() *cobra.Command {
	var sf serverFlags
	var keys string
	c := &cobra.Command{
		Use:   "restore DIR",
		Short: "put a backup (paddock admin backup) in place for a new install, before its first paddock serve",
		Long: `restore checks every file of the backup DIR against its manifest's SHA-256, then puts the
database into the new data dir (or, for a PostgreSQL backup, into the new, empty database
given with --store), the key files from --keys and the per-user settings. It refuses a
data dir that already has a database. Copy the workspaces and artifacts, and the
configuration files, by hand (docs/operations.md).`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cfg, err := sf.load()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			m, err := server.Restore(ctx, cfg, server.RestoreOptions{Dir: args[0], KeysDir: keys})
			if err != nil {
				return err
			}
			out := c.OutOrStdout()
			fmt.Fprintf(out, "Restored the %s database of %s (made %s) into %s.\n", m.Database.Backend, m.Database.From, m.Created.Format("2006-01-02 15:04:05Z"),
				server.StoreTargetRedacted(cfg))
			for _, f := range m.Files {
				if f.Restore == "" {
					fmt.Fprintf(out, "Put %s/%s (%s) where the new configuration names it (was %s).\n", args[0], f.Name, f.What, f.From)
				}
			}
			for _, p := range m.Elsewhere {
				fmt.Fprintf(out, "Copy %s from the old machine (was %s): %s.\n", p.What, p.Path, p.How)
			}
			return nil
		},
	}
	sf.add(c)
	c.Flags().StringVar(&keys, "keys", "", "the directory holding the key files kept apart from the backup")
	return c
}
