package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// txHelp is what the transaction commands share in their help.
const txHelp = `A transaction groups a multi-step change of a sandbox's workspace (a build, an edit of
many files): commit records all of it as one checkpoint (cause transaction), rollback puts
the workspace back exactly as it was at begin, whoever changed it since. While one is open
the agent takes no checkpoint by itself, and checkpoint, undo, redo, restore and another
begin are refused. A transaction still open when the sandbox's agent restarts is rolled
back.

` + historyHelp

// newTxCommand is paddock tx begin|commit|rollback.
func newTxCommand() *cobra.Command {
	c := &cobra.Command{
		Use:     "tx",
		Aliases: []string{"transaction"},
		Short:   "begin, commit or roll back a transaction on a sandbox's workspace",
		Long:    "tx begins, commits or rolls back a transaction on a sandbox's workspace.\n\n" + txHelp,
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return fmt.Errorf("tx: give a subcommand, begin, commit or rollback (see paddock tx --help): %w", errdefs.ErrInvalidArgument)
		},
	}
	c.AddCommand(newTxBeginCommand(), newTxCommitCommand(), newTxRollbackCommand())
	return c
}

func newTxBeginCommand() *cobra.Command {
	var message string
	c := &cobra.Command{
		Use:   "begin ID [-m MESSAGE]",
		Short: "open a transaction on a sandbox's workspace",
		Long:  "begin opens a transaction; MESSAGE becomes its commit's checkpoint message.\n\n" + txHelp,
		Args:  exactArgs(1, "ID"),
		RunE: func(c *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				tx, err := cl.Sandbox(args[0]).Begin(ctx, message)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "%s: transaction %s begun at checkpoint %s\n", args[0], tx.ID, tx.Base)
				return nil
			})
		},
	}
	c.Flags().StringVarP(&message, "message", "m", "", "what the transaction does, like \"upgrade dependencies\"")
	return c
}

func newTxCommitCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "commit ID",
		Short: "record a sandbox's open transaction as one checkpoint",
		Long:  "commit closes the open transaction, recording its work as one checkpoint.\n\n" + txHelp,
		Args:  exactArgs(1, "ID"),
		RunE: func(c *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				res, err := cl.Sandbox(args[0]).Commit(ctx)
				if err != nil {
					return err
				}
				if !res.Created {
					fmt.Fprintf(c.OutOrStdout(), "%s: transaction %s committed; it changed nothing (still at checkpoint %s)\n", args[0], res.Transaction.ID, res.Checkpoint.ID)
					return nil
				}
				fmt.Fprintf(c.OutOrStdout(), "%s: transaction %s committed as checkpoint %s (%s changed)\n", args[0], res.Transaction.ID, res.Checkpoint.ID, paths(res.Checkpoint.Changed))
				return nil
			})
		},
	}
}

func newTxRollbackCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "rollback ID",
		Short: "put a sandbox's workspace back as it was when its open transaction began",
		Long:  "rollback closes the open transaction, restoring the workspace in place exactly as it was\nat begin, and restarts the sandbox's app.\n\n" + txHelp,
		Args:  exactArgs(1, "ID"),
		RunE: func(c *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				res, err := cl.Sandbox(args[0]).Rollback(ctx)
				if err != nil {
					return err
				}
				app := "app restarted"
				if !res.AppRestarted {
					app = res.AppNote
				}
				fmt.Fprintf(c.OutOrStdout(), "%s: transaction %s rolled back; workspace at checkpoint %s again; %s\n", args[0], res.Transaction.ID, res.Current, app)
				return nil
			})
		},
	}
}
