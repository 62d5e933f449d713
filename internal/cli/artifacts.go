package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/errdefs"
)

func newAppArtifactsCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "artifacts",
		Short: "list your stored packages, newest first",
		Long: "artifacts lists what `paddock app package` stored: each artifact's id (its archive's\nSHA-256), runtime, project directory, sandbox, size, time, and where its bytes are kept\n" +
			"(local: the server's data dir; bucket: with a backup store, a sealed copy there, or how its upload goes).",
		Args: rangeArgs(0, 0, ""),
		RunE: func(c *cobra.Command, _ []string) error {
			w := c.OutOrStdout()
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				arts, err := cl.Artifacts(ctx)
				if err != nil {
					return err
				}
				if len(arts) == 0 {
					fmt.Fprintln(w, "no artifacts: `paddock app package` makes one")
					return nil
				}
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tRUNTIME\tDIR\tSANDBOX\tSIZE\tCREATED\tCOPIES")
				for _, a := range arts {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", a.ID, a.Runtime, a.Dir, a.SandboxID, a.Size, a.CreatedAt.Local().Format("2006-01-02 15:04:05"), copies(a))
				}
				return tw.Flush()
			})
		},
	}
	c.AddCommand(newAppArtifactsRemoveCommand())
	return c
}

// copies says where artifact a's bytes are kept, and how its bucket copy's upload goes
// until it is there.
func copies(a paddock.Artifact) string {
	out := strings.Join(a.Copies, ",")
	if a.Bucket != "" && a.Bucket != "stored" {
		out += ",bucket " + a.Bucket
	}
	return out
}

func newAppArtifactsRemoveCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "rm ID",
		Aliases: []string{"delete"},
		Short:   "delete an artifact, with its bytes and their copy in the backup store",
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				if err := cl.DeleteArtifact(ctx, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "deleted %s\n", args[0])
				return nil
			})
		},
	}
}

func newAppDownloadCommand() *cobra.Command {
	var out string
	var sbom bool
	c := &cobra.Command{
		Use:   "download ID",
		Short: "download a stored package's archive (or its SBOM)",
		Long:  "download writes an artifact's archive (a gzipped tar of the build output) to --output,\nby default RUNTIME-ID.tar.gz in the current directory; --sbom writes its CycloneDX SBOM\n(RUNTIME-ID.cdx.json) instead. `-o -` writes to standard output.",
		Args:  rangeArgs(1, 1, "ID"),
		RunE: func(c *cobra.Command, args []string) error {
			w := c.OutOrStdout()
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				a, err := cl.Artifact(ctx, args[0])
				if err != nil {
					return err
				}
				get, ext := cl.DownloadArtifact, ".tar.gz"
				if sbom {
					get, ext = cl.ArtifactSBOM, ".cdx.json"
				}
				if out == "-" {
					_, err := get(ctx, a.ID, w)
					return err
				}
				dst := out
				if dst == "" {
					dst = a.Runtime + "-" + a.ID[:12] + ext
				}
				return writeFileFrom(dst, func(f io.Writer) (int64, error) { return get(ctx, a.ID, f) }, w)
			})
		},
	}
	c.Flags().StringVarP(&out, "output", "o", "", "where to write it (default: RUNTIME-ID.tar.gz, or .cdx.json with --sbom)")
	c.Flags().BoolVar(&sbom, "sbom", false, "download the artifact's CycloneDX SBOM instead of its archive")
	return c
}

// writeFileFrom writes what get produces to dst whole (through a temporary file renamed
// into place), and says where it went.
func writeFileFrom(dst string, get func(io.Writer) (int64, error), w io.Writer) error {
	f, err := os.CreateTemp(filepath.Dir(dst), ".paddock-download-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", dst, err)
	}
	defer os.Remove(f.Name())
	n, err := get(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", dst, err)
	}
	if err := os.Rename(f.Name(), dst); err != nil {
		return fmt.Errorf("write %s: %w", dst, err)
	}
	fmt.Fprintf(w, "wrote %s (%d bytes)\n", dst, n)
	return nil
}

func newAppReleaseCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "release [ID]",
		Short: "make your live sandbox serve a stored package (default: the newest)",
		Long: "release unpacks an artifact into your live sandbox and makes it the live app: a Go\n" +
			"binary runs with PORT, a Node project packaged whole runs `npm start`, anything else\n" +
			"is served as files. Your dev sandbox keeps its dev server. Without ID, the newest\n" +
			"artifact (`paddock app artifacts`) is released.",
		Args: rangeArgs(0, 1, "[ID]"),
		RunE: func(c *cobra.Command, args []string) error {
			w := c.OutOrStdout()
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				var id string
				if len(args) == 1 {
					id = args[0]
				} else {
					arts, err := cl.Artifacts(ctx)
					if err != nil {
						return err
					}
					if len(arts) == 0 {
						return fmt.Errorf("no artifacts to release: `paddock app package` makes one: %w", errdefs.ErrFailedPrecondition)
					}
					id = arts[0].ID
				}
				sb, err := cl.Release(ctx, id)
				if err != nil {
					return err
				}
				fmt.Fprintf(w, "released %s: live sandbox %s runs %s in %s\n", id, sb.ID, strings.Join(sb.App.Command, " "), sb.App.Dir)
				return nil
			})
		},
	}
}
