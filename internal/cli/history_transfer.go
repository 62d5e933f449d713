package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// transferHelp is what export and import share in their help.
const transferHelp = `An export is one self-checking file: the workspace with its whole past (checkpoints,
undo position), which paddock history import gives to a new sandbox, on this host or
another. A corrupt or truncated file is refused whole, naming what is wrong.`

// withTransfer runs f with a signed-in client and no deadline: a transfer lasts as long
// as its file does (interrupt it to stop it).
func withTransfer(f func(ctx context.Context, cl *paddock.Client) error) error {
	cl, err := connect()
	if err != nil {
		return err
	}
	return f(context.Background(), cl)
}

func newHistoryExportCommand() *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "export ID [-o FILE]",
		Short: "write a sandbox's workspace history to one file",
		Long:  "export writes the sandbox's history to FILE, or to standard output with -o - or\nwithout -o when it is not a terminal.\n\n" + transferHelp,
		Args:  exactArgs(1, "ID"),
		RunE: func(c *cobra.Command, args []string) error {
			if (out == "" || out == "-") && stdoutIsTerminal(c) {
				return fmt.Errorf("history export: standard output is a terminal: give -o FILE: %w", errdefs.ErrInvalidArgument)
			}
			return withTransfer(func(ctx context.Context, cl *paddock.Client) error {
				if out == "" || out == "-" {
					return cl.Sandbox(args[0]).ExportHistory(ctx, c.OutOrStdout())
				}
				if err := exportToFile(ctx, cl, args[0], out); err != nil {
					return err
				}
				fmt.Fprintf(c.ErrOrStderr(), "%s: history exported to %s\n", args[0], out)
				return nil
			})
		},
	}
	c.Flags().StringVarP(&out, "output", "o", "", "the file to write (- for standard output)")
	return c
}

// exportToFile writes the export beside path and renames it into place once whole, so
// that a failed export leaves no file that looks like one.
func exportToFile(ctx context.Context, cl *paddock.Client, id, path string) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.partial")
	if err != nil {
		return fmt.Errorf("history export: %w", err)
	}
	defer os.Remove(f.Name()) // after a successful rename, there is nothing left to remove
	if err := cl.Sandbox(id).ExportHistory(ctx, f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("history export: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("history export: %w", err)
	}
	return nil
}

func newHistoryImportCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "import ID FILE",
		Short: "give a new sandbox a workspace history from an export",
		Long:  "import replaces the empty history of sandbox ID (a new sandbox's) with the export in FILE\n(- for standard input), restores its workspace to the export's current checkpoint and\nrestarts its app. A sandbox with a history of its own refuses it.\n\n" + transferHelp,
		Args:  exactArgs(2, "ID and FILE"),
		RunE: func(c *cobra.Command, args []string) error {
			in := c.InOrStdin()
			if args[1] != "-" {
				f, err := os.Open(args[1])
				if err != nil {
					return fmt.Errorf("history import: %w", err)
				}
				defer f.Close()
				in = f
			}
			return withTransfer(func(ctx context.Context, cl *paddock.Client) error {
				res, err := cl.Sandbox(args[0]).ImportHistory(ctx, in)
				if err != nil {
					return err
				}
				app := "app restarted"
				if !res.AppRestarted {
					app = res.AppNote
				}
				fmt.Fprintf(c.OutOrStdout(), "%s: history imported; workspace at checkpoint %s; %s\n", args[0], res.Current, app)
				return nil
			})
		},
	}
}

// stdoutIsTerminal says whether the command writes to a terminal, where an export's bytes
// would only garble the screen.
func stdoutIsTerminal(c *cobra.Command) bool {
	_, ok := terminal(c.OutOrStdout())
	return ok
}
