package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/capability"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// newCapabilityCommand is paddock sandbox capability mint|ls|revoke|narrow.
func newCapabilityCommand() *cobra.Command {
	c := &cobra.Command{
		Use:     "capability",
		Aliases: []string{"cap"},
		Short:   "mint, list, revoke or narrow capability tokens: credentials for part of one sandbox",
		Long: `A capability token lets its holder — an AI agent's tool loop, a build step — act on one
sandbox's exec and file API with less than your power: one directory (and what is under
it) or some programs, some actions, some file extensions, a size, for a time. Use it as
the API token: PADDOCK_TOKEN=pdk1.… paddock sandbox exec ID -- ls. The server checks it
on every request, the sandbox's agent checks it again on what it really touches, and the
sandbox's policy applies as well. Anyone holding a token can narrow it (narrow), never
widen it; revoking a token revokes every token narrowed from it.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return fmt.Errorf("sandbox capability: give a subcommand: mint, ls, revoke, narrow or rotate-key: %w", errdefs.ErrInvalidArgument)
		},
	}
	c.AddCommand(newCapabilityMintCommand(), newCapabilityListCommand(), newCapabilityRevokeCommand(), newCapabilityNarrowCommand())
	return c
}

func newCapabilityMintCommand() *cobra.Command {
	var req api.CapabilityRequest
	var ttl time.Duration
	c := &cobra.Command{
		Use:   "mint ID RESOURCE ACTION...",
		Short: "mint a token for sandbox ID: RESOURCE is file:/workspace/…, exec:NAME, exec:* or net:HOST",
		Long: `mint prints the token on standard output, once: the server keeps only its ID. ACTIONs are
read, write, delete (file:), exec (exec:) or connect (net:). Under an exec: token every
program a command line runs must be granted, sh -c strings and pipelines included. A net:
token goes to the egress proxy, as its user name: HTTPS_PROXY=http://TOKEN@127.0.0.1:3128.

  paddock sandbox capability mint sb-… file:/workspace/src read write --ext .ts --ext .tsx --ttl 30m
  paddock sandbox capability mint sb-… exec:npm exec
  paddock sandbox capability mint sb-… net:registry.npmjs.org connect --ttl 10m`,
		Args: minArgs(3, "ID RESOURCE ACTION..."),
		RunE: func(c *cobra.Command, args []string) error {
			req.Resource, req.Actions = args[1], args[2:]
			if ttl < 0 || ttl%time.Second != 0 {
				return fmt.Errorf("--ttl %s: want a positive whole number of seconds, like 30m or 2h: %w", ttl, errdefs.ErrInvalidArgument)
			}
			req.TTLSeconds = int64(ttl / time.Second)
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				out, err := cl.Sandbox(args[0]).MintCapability(ctx, req)
				if err != nil {
					return err
				}
				fmt.Fprintln(c.OutOrStdout(), out.Token)
				fmt.Fprintf(c.ErrOrStderr(), "capability %s: %s %s until %s\n", out.ID, strings.Join(out.Actions, ","), out.Resource, out.ExpiresAt.Local().Format(time.DateTime))
				return nil
			})
		},
	}
	c.Flags().Int64Var(&req.MaxSize, "max-size", 0, "the most bytes a file read or written under it may have")
	c.Flags().StringArrayVar(&req.AllowedExtensions, "ext", nil, "allow only files ending in this extension (repeat for more)")
	c.Flags().DurationVar(&ttl, "ttl", time.Hour, "how long the token lasts (at most 720h)")
	return c
}

func newCapabilityListCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "ls ID",
		Aliases: []string{"list"},
		Short:   "list sandbox ID's tokens (their IDs and grants, never the tokens)",
		Args:    exactArgs(1, "ID"),
		RunE: func(c *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				caps, err := cl.Sandbox(args[0]).Capabilities(ctx)
				if err != nil {
					return err
				}
				printCapabilities(c.OutOrStdout(), caps, time.Now())
				return nil
			})
		},
	}
}

func printCapabilities(w io.Writer, caps []api.Capability, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRESOURCE\tACTIONS\tEXPIRES\tSTATE")
	for _, c := range caps {
		state := "valid"
		switch {
		case c.RevokedAt != nil:
			state = "revoked"
		case !now.Before(c.ExpiresAt):
			state = "expired"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.ID, c.Resource, strings.Join(c.Actions, ","), c.ExpiresAt.Local().Format(time.DateTime), state)
	}
	tw.Flush()
}

func newCapabilityRevokeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID CAPABILITY-ID",
		Short: "revoke a token of sandbox ID, and every token narrowed from it",
		Args:  exactArgs(2, "ID CAPABILITY-ID"),
		RunE: func(c *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				if _, err := cl.Sandbox(args[0]).RevokeCapability(ctx, args[1]); err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "capability %s revoked\n", args[1])
				return nil
			})
		},
	}
}

func newCapabilityNarrowCommand() *cobra.Command {
	var cv capability.Caveat
	var resource string
	var actions []string
	var ttl time.Duration
	c := &cobra.Command{
		Use:   "narrow TOKEN",
		Short: "print TOKEN narrowed by a caveat (a path under its own, fewer actions, …); needs no server",
		Long: `narrow appends a caveat to TOKEN ("-" reads it from standard input) and prints the
narrower token. It needs no key and no server: anyone holding a token can do it, and
nothing a caveat says can widen what the token allows.

  paddock sandbox capability narrow "$TOKEN" --resource file:/workspace/src/ui --action read --ttl 5m`,
		Args: exactArgs(1, "TOKEN"),
		RunE: func(c *cobra.Command, args []string) error {
			tok := args[0]
			if tok == "-" {
				b, err := io.ReadAll(io.LimitReader(c.InOrStdin(), capability.MaxTokenLen+1))
				if err != nil {
					return err
				}
				tok = strings.TrimSpace(string(b))
			}
			cv.Resource = resource
			for _, a := range actions {
				cv.Actions = append(cv.Actions, capability.Action(a))
			}
			if ttl > 0 {
				cv.Constraints.Expiry = time.Now().Add(ttl)
			}
			out, err := capability.Attenuate(tok, cv)
			if err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), out)
			return nil
		},
	}
	c.Flags().StringVar(&resource, "resource", "", "limit it to this resource (e.g. a path under its own)")
	c.Flags().StringArrayVar(&actions, "action", nil, "limit it to this action (repeat for more)")
	c.Flags().Int64Var(&cv.Constraints.MaxSize, "max-size", 0, "limit the bytes of a file read or written")
	c.Flags().StringArrayVar(&cv.Constraints.AllowedExtensions, "ext", nil, "limit it to files ending in this extension (repeat for more)")
	c.Flags().DurationVar(&ttl, "ttl", 0, "make it expire this long from now")
	return c
}
