package cli

import (
	"context"
	"fmt"
	"regexp"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// remotePath is ID:PATH, a path in a sandbox; anything else is a local path (write
// ./sb-…:x for a local file whose name looks like one).
var remotePath = regexp.MustCompile(`^(sb-[a-z0-9]+):(.*)$`)

func newCopyCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "cp LOCAL ID:PATH | ID:PATH LOCAL",
		Short: "copy files and directories (recursively) into or out of a sandbox's workspace",
		Long: `cp copies a file or a whole directory between this machine and a sandbox, streamed as a
tar archive: no size bounds it but the sandbox's disk and its policy's file rules.

The source becomes the destination, as cp -r to a new name does: "cp ./site sb-…:www"
makes www in the workspace from ./site. A destination that ends in "/" (in the sandbox)
or is an existing directory (here) is a directory to copy into. PATH is in the workspace:
src, /src and /workspace/src are the same. ID:. is the whole workspace.

Each file goes through the sandbox's file API, so its policy decides each one and its
history records the change. An archive entry that would land outside the destination,
a link or a device is refused, naming it. Symlinks are copied out of a sandbox, and
skipped (each named on stderr) into one.`,
		Args: exactArgs(2, "LOCAL ID:PATH or ID:PATH LOCAL"),
		RunE: func(c *cobra.Command, args []string) error {
			from, to := remotePath.FindStringSubmatch(args[0]), remotePath.FindStringSubmatch(args[1])
			switch {
			case from != nil && to != nil:
				return fmt.Errorf("sandbox cp: both %q and %q are in a sandbox; copy between a sandbox and this machine: %w", args[0], args[1], errdefs.ErrInvalidArgument)
			case from == nil && to == nil:
				return fmt.Errorf("sandbox cp: neither %q nor %q is ID:PATH; name the sandbox's side as sb-…:PATH: %w", args[0], args[1], errdefs.ErrInvalidArgument)
			}
			return withTransfer(func(ctx context.Context, cl *paddock.Client) error {
				var res paddock.ArchiveResult
				var err error
				if to != nil {
					res, err = cl.Sandbox(to[1]).CopyIn(ctx, args[0], orWorkspace(to[2]))
				} else {
					res, err = cl.Sandbox(from[1]).CopyOut(ctx, orWorkspace(from[2]), args[1])
				}
				for _, s := range res.Skipped {
					fmt.Fprintf(c.ErrOrStderr(), "paddock: skipped symlink %s\n", s)
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "%s -> %s: %d files, %d directories, %d bytes\n", args[0], args[1], res.Files, res.Dirs, res.Bytes)
				return nil
			})
		},
	}
}

func orWorkspace(p string) string {
	if p == "" {
		return "."
	}
	return p
}
