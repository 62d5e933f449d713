package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// newFilesCommand is paddock sandbox files mkdir|mv|rm.
func newFilesCommand() *cobra.Command {
	c := &cobra.Command{
		Use:     "files",
		Aliases: []string{"file"},
		Short:   "make directories, move and remove files in a sandbox's workspace",
		Long: `Paths name the sandbox's workspace: src/a.go, /src/a.go and /workspace/src/a.go are the
same file, and no path (nor a symlink on the way) leads outside it. The sandbox's policy
decides each operation before it reaches the sandbox, and a capability token used as
PADDOCK_TOKEN bounds it further (write to make, delete to remove, both to move).
To copy files and directories in or out, use paddock sandbox cp.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return fmt.Errorf("sandbox files: give a subcommand: mkdir, mv or rm: %w", errdefs.ErrInvalidArgument)
		},
	}
	c.AddCommand(newFilesMkdirCommand(), newFilesMoveCommand(), newFilesRemoveCommand())
	return c
}

func newFilesMkdirCommand() *cobra.Command {
	var req api.FileMkdirRequest
	c := &cobra.Command{
		Use:   "mkdir ID PATH...",
		Short: "make directories in sandbox ID's workspace, printing each one made",
		Args:  minArgs(2, "ID PATH..."),
		RunE: func(c *cobra.Command, args []string) error {
			return eachPath(c, "directories not made", args, func(ctx context.Context, cl *paddock.Client, p string) error {
				r := req
				r.Path = p
				fi, err := cl.Sandbox(args[0]).MkdirRequest(ctx, r)
				if err == nil {
					fmt.Fprintln(c.OutOrStdout(), fi.Path)
				}
				return err
			})
		},
	}
	c.Flags().BoolVarP(&req.Parents, "parents", "p", false, "make missing parents, and accept an existing directory")
	c.Flags().StringVarP(&req.Mode, "mode", "m", "", "octal permission, set exactly (default 755)")
	return c
}

func newFilesMoveCommand() *cobra.Command {
	var overwrite bool
	c := &cobra.Command{
		Use:     "mv ID FROM TO",
		Aliases: []string{"move"},
		Short:   "move (rename) a file or directory in sandbox ID's workspace",
		Long: `mv renames FROM to TO, both in the workspace: TO is the new path, not a directory to move
into. Something already at TO is an error unless --force is given.`,
		Args: exactArgs(3, "ID FROM TO"),
		RunE: func(c *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				fi, err := cl.Sandbox(args[0]).Move(ctx, args[1], args[2], overwrite)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "%s -> %s\n", args[1], fi.Path)
				return nil
			})
		},
	}
	c.Flags().BoolVarP(&overwrite, "force", "f", false, "replace what is at TO")
	return c
}

func newFilesRemoveCommand() *cobra.Command {
	var recursive bool
	c := &cobra.Command{
		Use:   "rm ID PATH...",
		Short: "remove files, symlinks (never their targets) or, with -r, directories from sandbox ID's workspace",
		Args:  minArgs(2, "ID PATH..."),
		RunE: func(c *cobra.Command, args []string) error {
			return eachPath(c, "paths not removed", args, func(ctx context.Context, cl *paddock.Client, p string) error {
				err := cl.Sandbox(args[0]).Remove(ctx, p, recursive)
				if err == nil {
					fmt.Fprintln(c.OutOrStdout(), p)
				}
				return err
			})
		},
	}
	c.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove directories and what they hold")
	return c
}

// eachPath runs op on every path of args (ID PATH...). One path's error is the command's;
// with several, each failure is reported on stderr and the rest go on, as rm does.
func eachPath(c *cobra.Command, failed string, args []string, op func(ctx context.Context, cl *paddock.Client, p string) error) error {
	return withClient(func(ctx context.Context, cl *paddock.Client) error {
		paths := args[1:]
		var n int
		for _, p := range paths {
			if err := op(ctx, cl, p); err != nil {
				if len(paths) == 1 {
					return err
				}
				n++
				fmt.Fprintf(c.ErrOrStderr(), "paddock: %s\n", message(err))
			}
		}
		if n > 0 {
			return fmt.Errorf("%d of %d %s", n, len(paths), failed)
		}
		return nil
	})
}
