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
)

func newSandboxAppCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "app ID",
		Short: "show what a sandbox's app is doing: running, or crashed and how",
		Long: "app shows the state of the sandbox's supervised app as its agent sees it. The agent\n" +
			"restarts an app that exits, with exponential backoff, and never goes down with it:\n" +
			"a crashed app shows as backoff, with its exit and the end of its output.",
		Args: exactArgs(1, "ID"),
		RunE: func(c *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				st, err := cl.Sandbox(args[0]).App(ctx)
				if err != nil {
					return err
				}
				printApp(c.OutOrStdout(), st, time.Now())
				return nil
			})
		},
	}
}

// printApp writes the app's state in a few lines, the last ended run's output and the
// running app's indented below.
func printApp(w io.Writer, st api.AppStatus, now time.Time) {
	fmt.Fprintf(w, "%s for %s, %d restarts\n", st.State, now.Sub(st.Since).Round(time.Second), st.Restarts)
	if st.URL != "" {
		fmt.Fprintf(w, "served at %s\n", st.URL)
	}
	if st.NextStart != nil {
		fmt.Fprintf(w, "starts again in %s\n", st.NextStart.Sub(now).Round(100*time.Millisecond))
	}
	if e := st.LastExit; e != nil {
		switch {
		case e.Error != "":
			fmt.Fprintf(w, "last run: %s\n", e.Error)
		case e.Signal != 0:
			fmt.Fprintf(w, "last run: killed by signal %d\n", e.Signal)
		default:
			fmt.Fprintf(w, "last run: exit status %d\n", e.ExitCode)
		}
	}
	printOutput(w, "last output", st.LastOutput, st.LastOutputTruncated)
	printOutput(w, "output", st.Output, st.OutputTruncated)
}

// printOutput writes a run's output under its title, indented; oldest first, so the
// running app's comes last, next to the prompt.
func printOutput(w io.Writer, title, out string, cut bool) {
	out = strings.TrimRight(out, "\n")
	if out == "" {
		return
	}
	if cut {
		title += " (its start cut)"
	}
	fmt.Fprintln(w, title+":")
	for line := range strings.Lines(out) {
		fmt.Fprintf(w, "  %s", line)
	}
	fmt.Fprintln(w)
}
