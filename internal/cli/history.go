package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/api"
)

// historyHelp is what the history commands share in their help.
const historyHelp = `The sandbox's agent checkpoints its workspace by itself: after every change through
the file API (cause agent-write), at the end of every exec (exec), and once changes made
by any process settle (watcher: half a second without a change, or 3 s into a burst). Undo, redo and restore rewrite the workspace in
place, record what they did (restore), and restart the sandbox's app on the restored
files, whether it was running, crashed or crash-looping. The sandbox must be running, in
the container tier.`

// newHistoryCommands are paddock history, checkpoint, undo, redo, restore and tx.
func newHistoryCommands() []*cobra.Command {
	return []*cobra.Command{newHistoryCommand(), newCheckpointCommand(), newTxCommand(),
		newRestoreOpCommand("undo", "go back one checkpoint in a sandbox's workspace", (*paddock.Sandbox).Undo),
		newRestoreOpCommand("redo", "take back the last undo in a sandbox's workspace", (*paddock.Sandbox).Redo),
		newRestoreCommand()}
}

func newHistoryCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "history ID",
		Short: "show the timeline of a sandbox's workspace, newest first",
		Long:  "history shows the checkpoints of a sandbox's workspace, newest first; * marks the one\nundo starts from.\n\n" + historyHelp,
		Args:  exactArgs(1, "ID"),
		RunE: func(c *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				h, err := cl.Sandbox(args[0]).History(ctx)
				if err != nil {
					return err
				}
				printHistory(c.OutOrStdout(), h, time.Local)
				return nil
			})
		},
	}
	c.AddCommand(newHistoryExportCommand(), newHistoryImportCommand())
	return c
}

// printHistory writes the timeline as a table; * marks the current checkpoint.
func printHistory(w io.Writer, h api.History, loc *time.Location) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\tID\tTIME\tCAUSE\tCHANGED\tMESSAGE")
	for _, cp := range h.Checkpoints {
		mark := ""
		if cp.ID == h.Current {
			mark = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", mark, cp.ID, cp.Time.In(loc).Format(time.DateTime), cp.Cause, cp.Changed, dash(cp.Message))
	}
	tw.Flush()
	if n := oldestCompacted(h); n > 0 {
		fmt.Fprintf(w, "(%d older checkpoints were compacted to keep the history within its size budget)\n", n)
	}
	if tx := h.Transaction; tx != nil {
		fmt.Fprintf(w, "transaction %s open since %s at checkpoint %s%s: paddock tx commit or rollback\n", tx.ID, tx.Time.In(loc).Format(time.DateTime), tx.Base, quoted(tx.Message))
	}
}

func newCheckpointCommand() *cobra.Command {
	var message string
	c := &cobra.Command{
		Use:   "checkpoint ID [-m MESSAGE]",
		Short: "checkpoint a sandbox's workspace now",
		Long:  "checkpoint records the sandbox's workspace as it is now. When nothing changed since the\ncurrent checkpoint, it records nothing and says so.\n\n" + historyHelp,
		Args:  exactArgs(1, "ID"),
		RunE: func(c *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				res, err := cl.Sandbox(args[0]).Checkpoint(ctx, message)
				if err != nil {
					return err
				}
				if !res.Created {
					fmt.Fprintf(c.OutOrStdout(), "nothing changed since checkpoint %s\n", res.Checkpoint.ID)
					return nil
				}
				fmt.Fprintf(c.OutOrStdout(), "checkpoint %s (%s changed)\n", res.Checkpoint.ID, paths(res.Checkpoint.Changed))
				return nil
			})
		},
	}
	c.Flags().StringVarP(&message, "message", "m", "", "what the checkpoint is, like \"before refactor\"")
	return c
}

func newRestoreOpCommand(name, short string, op func(*paddock.Sandbox, context.Context) (api.RestoreResult, error)) *cobra.Command {
	return &cobra.Command{
		Use:   name + " ID",
		Short: short,
		Long:  name + " rewrites the sandbox's workspace in place and restarts its app.\n\n" + historyHelp,
		Args:  exactArgs(1, "ID"),
		RunE: func(c *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				res, err := op(cl.Sandbox(args[0]), ctx)
				if err != nil {
					return err
				}
				printRestored(c.OutOrStdout(), args[0], res)
				return nil
			})
		},
	}
}

func newRestoreCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "restore ID CHECKPOINT",
		Short: "make a sandbox's workspace exactly a checkpoint's state",
		Long:  "restore rewrites the sandbox's workspace in place to CHECKPOINT's state (see paddock\nhistory ID) and restarts its app. Changes not yet checkpointed are checkpointed first, so\nundo takes the restore back.\n\n" + historyHelp,
		Args:  exactArgs(2, "ID and CHECKPOINT"),
		RunE: func(c *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				res, err := cl.Sandbox(args[0]).Restore(ctx, args[1])
				if err != nil {
					return err
				}
				printRestored(c.OutOrStdout(), args[0], res)
				return nil
			})
		},
	}
}

// printRestored says which state the workspace is in now, and what became of the app.
func printRestored(w io.Writer, id string, res api.RestoreResult) {
	app := "app restarted"
	if !res.AppRestarted {
		app = res.AppNote
	}
	fmt.Fprintf(w, "%s: workspace at checkpoint %s (%s changed; recorded as checkpoint %s); %s\n",
		id, res.Checkpoint.Restores, paths(res.Checkpoint.Changed), res.Checkpoint.ID, app)
}

// oldestCompacted is how many checkpoints the size budget dropped before the oldest shown.
func oldestCompacted(h api.History) int {
	if len(h.Checkpoints) == 0 {
		return 0
	}
	return h.Checkpoints[len(h.Checkpoints)-1].Compacted
}

func quoted(s string) string {
	if s == "" {
		return ""
	}
	return " (" + strconv.Quote(s) + ")"
}

func paths(n int) string {
	if n == 1 {
		return "1 path"
	}
	return strconv.Itoa(n) + " paths"
}
