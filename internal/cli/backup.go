package cli

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	paddock "github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

func newBackupCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "backup",
		Short: "back sandboxes' workspace histories up to the server's S3 store, list and restore them",
	}
	now := &cobra.Command{
		Use:   "now SANDBOX",
		Short: "checkpoint SANDBOX and back its history up",
		Long:  "now takes a checkpoint of SANDBOX (when it runs) and uploads what the store lacks of its\nhistory, sealed under the server's backup key. A store that is down is tried again with\nbackoff. It prints the backup's ID.",
		Args:  exactArgs(1, "SANDBOX"),
		RunE: func(c *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				b, err := cl.Sandbox(args[0]).BackupNow(ctx)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.ErrOrStderr(), "backed up checkpoint %s: %d of %d blobs uploaded, %d bytes\n", b.Checkpoint, b.UploadedBlobs, b.Blobs, b.UploadedBytes)
				_, err = fmt.Fprintln(c.OutOrStdout(), b.ID)
				return err
			})
		},
	}
	var all bool
	ls := &cobra.Command{
		Use:   "ls SANDBOX | ls --all",
		Short: "list SANDBOX's backups, and any attempt under way or failed; or the sandboxes in the store",
		Long: "ls SANDBOX lists SANDBOX's backups (also those of a sandbox this server's database does not\n" +
			"have: for an admin, or for the account its backups' record names). ls --all lists the sandboxes\n" +
			"with backups in the store, with each one's name and owner as its newest backup's record tells:\n" +
			"every one for an admin; for a user, their own, deleted ones among them: what restores from the\n" +
			"bucket alone.",
		Args: func(c *cobra.Command, args []string) error {
			if all {
				return exactArgs(0, "no SANDBOX with --all")(c, args)
			}
			return exactArgs(1, "SANDBOX")(c, args)
		},
		RunE: func(c *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				if all {
					l, err := cl.BackupSandboxes(ctx)
					if err != nil {
						return err
					}
					tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "SANDBOX\tNAME\tOWNER\tBACKUPS\tNEWEST\tHERE\tERROR")
					for _, s := range l.Sandboxes {
						here := "no"
						if s.Known {
							here = "yes"
						}
						fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", s.ID, s.Name, s.Owner, s.Backups, s.Newest, here, s.Error)
					}
					return tw.Flush()
				}
				l, err := cl.Sandbox(args[0]).Backups(ctx)
				if err != nil {
					return err
				}
				if l.StoreError != "" {
					fmt.Fprintf(c.ErrOrStderr(), "the store could not be listed: %s\n", l.StoreError)
				}
				tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tTIME\tSTATE\tCHECKPOINT\tUPLOADED\tERROR")
				for _, b := range l.Backups {
					id := b.ID
					if id == "" {
						id = "-"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", id, b.Time.Format(time.RFC3339), b.State, b.Checkpoint, b.UploadedBytes, b.Error)
				}
				return tw.Flush()
			})
		},
	}
	var at, into string
	restore := &cobra.Command{
		Use:   "restore SANDBOX [--at TIME|BACKUP] [--into NEW]",
		Short: "restore a backup of SANDBOX into it, or into a new sandbox",
		Long:  "restore writes a backup of SANDBOX back: --at picks a backup by its ID or the newest at or\nbefore a time (RFC 3339); without it, the newest. --into NEW makes a new sandbox of yours\nnamed NEW from it (and prints its ID); without it, SANDBOX's own workspace goes back to the\nbackup's checkpoint. Every object is authenticated first; a tampered one is named.",
		Args:  exactArgs(1, "SANDBOX"),
		RunE: func(c *cobra.Command, args []string) error {
			req := paddock.BackupRestoreRequest{Into: into}
			if at != "" {
				if _, err := api.ParseBackupID(at); err == nil {
					req.Backup = at
				} else if t, err := time.Parse(time.RFC3339Nano, at); err == nil {
					req.At = t
				} else {
					return fmt.Errorf("--at %q: want a backup ID (from paddock backup ls) or a time like 2026-01-02T15:04:05Z: %w", at, errdefs.ErrInvalidArgument)
				}
			}
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				res, err := cl.Sandbox(args[0]).RestoreBackup(ctx, req)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.ErrOrStderr(), "restored backup %s into %s at checkpoint %s\n", res.Backup, res.Sandbox, res.Checkpoint)
				if res.New != nil {
					_, err = fmt.Fprintln(c.OutOrStdout(), res.New.ID)
				}
				return err
			})
		},
	}
	restore.Flags().StringVar(&at, "at", "", "a backup's ID, or a time: the newest backup at or before it (default: the newest)")
	restore.Flags().StringVar(&into, "into", "", "a new sandbox's name to restore into (default: SANDBOX itself)")
	ls.Flags().BoolVar(&all, "all", false, "list every sandbox with backups in the store (admins only)")
	var dry bool
	prune := &cobra.Command{
		Use:   "prune [SANDBOX] [--dry-run]",
		Short: "apply the backups' retention now, to SANDBOX's backups or every sandbox's",
		Long: "prune applies the server's retention (backup.keep_last, keep_daily, prune_grace) now: it\n" +
			"drops SANDBOX's backups the policy does not keep (every sandbox's, for an admin, without\n" +
			"SANDBOX), then deletes the objects no kept backup names. It prints each backup dropped;\n" +
			"--dry-run deletes nothing and prints what would go.",
		Args: rangeArgs(0, 1, "[SANDBOX]"),
		RunE: func(c *cobra.Command, args []string) error {
			req := paddock.BackupPruneRequest{DryRun: dry}
			if len(args) == 1 {
				req.Sandbox = args[0]
			}
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				res, err := cl.PruneBackups(ctx, req)
				if err != nil {
					return err
				}
				verb := "dropped"
				if res.DryRun {
					verb = "would drop"
				}
				for _, d := range res.Dropped {
					fmt.Fprintf(c.OutOrStdout(), "%s %s %s\n", verb, d.Sandbox, d.Backup)
				}
				deleted := "deleted"
				if res.DryRun {
					deleted = "would delete"
				}
				_, err = fmt.Fprintf(c.ErrOrStderr(), "kept %d backups, %s %d; %s %d objects no kept backup names (%d bytes)\n",
					res.Kept, verb, len(res.Dropped), deleted, res.Blobs, res.Bytes)
				return err
			})
		},
	}
	prune.Flags().BoolVar(&dry, "dry-run", false, "delete nothing; print what would be deleted")
	root.AddCommand(now, ls, restore, prune)
	return root
}
