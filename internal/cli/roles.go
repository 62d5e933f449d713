package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/api"
)

func newRolesCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "roles",
		Short: "show your live and dev sandboxes (creating them when missing)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				r, err := cl.Roles(ctx)
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ROLE\tID\tSTATE")
				for _, sb := range []api.Sandbox{r.Live, r.Dev} {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", sb.Role, sb.ID, sb.State)
				}
				tw.Flush()
				fmt.Fprintf(c.OutOrStdout(), "generation %d\n", r.Generation)
				return nil
			})
		},
	}
}

func newPromoteCommand() *cobra.Command {
	var swap, release bool
	c := &cobra.Command{
		Use:   "promote",
		Short: "put dev's work live: release its packaged build into live, or swap live and dev",
		Long: `promote puts dev's work live. When dev runs a provider's dev server (paddock app
preview) and has a packaged artifact (paddock app package), live is made to serve that
artifact and dev keeps its dev server. Otherwise live and dev swap: dev goes live.
--swap and --release force either.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			mode := api.PromoteAuto
			switch {
			case swap:
				mode = api.PromoteSwap
			case release:
				mode = api.PromoteRelease
			}
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				r, err := cl.PromoteMode(ctx, mode)
				if err != nil {
					return err
				}
				printPromotion(c.OutOrStdout(), r)
				return nil
			})
		},
	}
	c.Flags().BoolVar(&swap, "swap", false, "swap live and dev, even when dev has a packaged build")
	c.Flags().BoolVar(&release, "release", false, "make live serve dev's newest packaged build (an error when there is none)")
	c.MarkFlagsMutuallyExclusive("swap", "release")
	return c
}

// printPromotion says what a promotion did.
func printPromotion(w io.Writer, r api.Roles) {
	if r.Mode == api.PromoteRelease {
		fmt.Fprintf(w, "released artifact %s into live %s: dev %s keeps its dev server\n", r.Artifact[:min(12, len(r.Artifact))], r.Live.ID, r.Dev.ID)
	} else {
		fmt.Fprintf(w, "swapped: live is now %s, dev is now %s\n", r.Live.ID, r.Dev.ID)
	}
	if r.Note != "" {
		fmt.Fprintf(w, "note: %s\n", r.Note)
	}
}
