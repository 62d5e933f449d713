package cli

import (
	"context"
	"fmt"
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
	return &cobra.Command{
		Use:   "promote",
		Short: "swap your live and dev sandboxes: dev goes live",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				r, err := cl.Promote(ctx)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "live is now %s, dev is now %s\n", r.Live.ID, r.Dev.ID)
				return nil
			})
		},
	}
}
