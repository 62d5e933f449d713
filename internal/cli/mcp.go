package cli

import (
	"context"
	"io"
	"slices"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock/internal/api"
	pmcp "github.com/paddockhq/paddock/internal/mcp"
)

func newMCPCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "serve paddock's sandbox tools to an MCP client over stdio",
		Long: `mcp serves the Model Context Protocol on stdin and stdout, for an agent host
(Claude Code, Cursor, Codex, any MCP client) to start as a subprocess. Its tools create,
list, stop and delete sandboxes, run commands, read, write and edit files, and move
through a workspace's history, as you, with the credentials paddock login stored (or
PADDOCK_SERVER and PADDOCK_TOKEN); a token without scope write gets only the tools
that read. Nothing but the protocol is written to stdout; log
lines go to stderr. See docs/mcp.md.

  claude mcp add paddock -- paddock mcp`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			client, err := connect()
			if err != nil {
				return err
			}
			log := logger(c.ErrOrStderr())
			opts := pmcp.Options{Version: Version, Log: log}
			// Credentials that may only read get only the tools that read, as over HTTP.
			if me, err := client.Me(c.Context()); err != nil {
				log.Warn("mcp: could not ask the server what these credentials may do; serving every tool", "err", err)
			} else if len(me.Scopes) > 0 && !slices.Contains(me.Scopes, string(api.ScopeWrite)) {
				opts.ReadOnly = true
				opts.Refuse = func(_ context.Context, tool string) error {
					return api.ScopeError(api.ScopeWrite, "the MCP tool "+tool)
				}
			}
			b := pmcp.NewAudited(pmcp.Client{C: client}, log)
			defer b.Close() // the last calls' events
			s := pmcp.NewServer(b, opts)
			t := &sdk.IOTransport{Reader: io.NopCloser(c.InOrStdin()), Writer: nopWriteCloser{c.OutOrStdout()}}
			return s.Run(c.Context(), t)
		},
	}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
