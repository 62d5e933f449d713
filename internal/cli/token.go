package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

func newTokenCommand() *cobra.Command {
	c := &cobra.Command{
		Use:     "token",
		Aliases: []string{"tokens"},
		Short:   "your API tokens on a paddock server (ls, create, rm)",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return fmt.Errorf("token: give a subcommand (see paddock token --help): %w", errdefs.ErrInvalidArgument)
		},
	}
	c.AddCommand(newTokenListCommand(), newTokenCreateCommand(), newTokenRevokeCommand())
	return c
}

func newTokenListCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "list your API tokens: scopes, expiry and last use (never the secrets)",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				list, err := cl.ListTokens(ctx)
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tNAME\tPREFIX\tSCOPES\tEXPIRES\tLAST USED")
				for _, t := range list {
					fmt.Fprintf(tw, "%s\t%s\t%s…\t%s\t%s\t%s\n", t.ID, t.Name, t.Prefix, strings.Join(t.Scopes, ","), expiry(t.ExpiresAt), lastUsed(t.LastUsedAt))
				}
				return tw.Flush()
			})
		},
	}
}

func newTokenCreateCommand() *cobra.Command {
	var scopes string
	var expires time.Duration
	c := &cobra.Command{
		Use:   "create NAME",
		Short: "make an API token and print it (shown this once)",
		Long: `create makes an API token named NAME and prints its secret once. --scope lists what it
may do: read, write, tokens, admin (default read,write). --expires sets its lifetime
(default and maximum are the server's tokens.default_ttl and tokens.max_ttl).`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			req := api.CreateTokenRequest{Name: args[0]}
			if scopes != "" {
				sc, err := api.ParseScopes(scopes)
				if err != nil {
					return err
				}
				req.Scopes = sc.Strings()
			}
			if expires < 0 {
				return fmt.Errorf("--expires %s: want a positive duration: %w", expires, errdefs.ErrInvalidArgument)
			}
			if expires > 0 {
				req.ExpiresIn = expires.String()
			}
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				t, err := cl.CreateToken(ctx, req)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.ErrOrStderr(), "token %s (%s), scopes %s, expires %s; it is shown this once:\n", t.ID, t.Name, strings.Join(t.Scopes, ","), expiry(t.ExpiresAt))
				fmt.Fprintln(c.OutOrStdout(), t.Secret)
				return nil
			})
		},
	}
	c.Flags().StringVar(&scopes, "scope", "", "scopes, comma-separated: read, write, tokens, admin (default read,write)")
	c.Flags().DurationVar(&expires, "expires", 0, "lifetime, like 24h (default: the server's tokens.default_ttl)")
	return c
}

func newTokenRevokeCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "rm ID",
		Aliases: []string{"revoke"},
		Short:   "revoke an API token",
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				if err := cl.RevokeToken(ctx, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "revoked %s\n", args[0])
				return nil
			})
		},
	}
}

func newInviteCommand() *cobra.Command {
	c := &cobra.Command{
		Use:     "invite",
		Aliases: []string{"invites"},
		Short:   "registration invites on a paddock server (admins: ls, create, rm)",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return fmt.Errorf("invite: give a subcommand (see paddock invite --help): %w", errdefs.ErrInvalidArgument)
		},
	}
	var uses int
	var expires time.Duration
	create := &cobra.Command{
		Use:   "create",
		Short: "make an invite code for /register (shown this once)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if uses < 0 || expires < 0 {
				return fmt.Errorf("--uses and --expires must be positive: %w", errdefs.ErrInvalidArgument)
			}
			req := api.CreateInviteRequest{Uses: uses}
			if expires > 0 {
				req.ExpiresIn = expires.String()
			}
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				in, err := cl.CreateInvite(ctx, req)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.ErrOrStderr(), "invite %s: %d use(s), expires %s; the code is shown this once:\n", in.ID, in.MaxUses, expiry(&in.ExpiresAt))
				fmt.Fprintln(c.OutOrStdout(), in.Code)
				return nil
			})
		},
	}
	create.Flags().IntVar(&uses, "uses", 1, "how many accounts it may make")
	create.Flags().DurationVar(&expires, "expires", 0, "lifetime, like 72h (default 168h, at most 2160h)")
	list := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "list the invites (never their codes)",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				ins, err := cl.ListInvites(ctx)
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tPREFIX\tUSED\tEXPIRES\tSTATE")
				for _, in := range ins {
					state := "open"
					switch {
					case in.RevokedAt != nil:
						state = "revoked"
					case in.Uses >= in.MaxUses:
						state = "used up"
					case !time.Now().Before(in.ExpiresAt):
						state = "expired"
					}
					fmt.Fprintf(tw, "%s\t%s…\t%d/%d\t%s\t%s\n", in.ID, in.Prefix, in.Uses, in.MaxUses, expiry(&in.ExpiresAt), state)
				}
				return tw.Flush()
			})
		},
	}
	revoke := &cobra.Command{
		Use:     "rm ID",
		Aliases: []string{"revoke"},
		Short:   "revoke an invite",
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				if err := cl.RevokeInvite(ctx, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "revoked %s\n", args[0])
				return nil
			})
		},
	}
	c.AddCommand(create, list, revoke)
	return c
}

// expiry shows when something expires: its date and how far off.
func expiry(at *time.Time) string {
	if at == nil || at.IsZero() {
		return "never"
	}
	d := time.Until(*at)
	if d <= 0 {
		return "expired"
	}
	return fmt.Sprintf("%s (in %s)", at.UTC().Format("2006-01-02 15:04Z"), age(d))
}

func lastUsed(at *time.Time) string {
	if at == nil {
		return "never"
	}
	return age(time.Since(*at)) + " ago"
}
