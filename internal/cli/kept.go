package cli

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/runner"
)

// keptFlags are what `paddock run` was told about where its sandboxes live.
type keptFlags struct{ config, user string }

func (f *keptFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&f.config, "config", "", "runner configuration file (YAML), as given to paddock run")
	c.Flags().StringVar(&f.user, "user", "", "whose sandboxes, as given to paddock run (default: $USER)")
}

// runner is the runner `paddock run` used, for the user it ran as.
func (f *keptFlags) runner(c *cobra.Command) (*runner.Runner, string, error) {
	cfg, err := runner.LoadConfig(f.config)
	if err != nil {
		return nil, "", err
	}
	if cfg.OnCluster() {
		return nil, "", fmt.Errorf("the runner's backend is a cluster: a one-shot sandbox there is a pod that ends with its run: %w", errdefs.ErrFailedPrecondition)
	}
	user := f.user
	if user == "" {
		user = defaultUser()
	}
	return runner.New(cfg, logger(c.ErrOrStderr())), user, nil
}

func newKeptCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "kept",
		Short: "sandboxes paddock run left on this host: kept with --keep, or left by a killed run (ls, rm)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return fmt.Errorf("kept: give a subcommand (see paddock kept --help): %w", errdefs.ErrInvalidArgument)
		},
	}
	c.AddCommand(newKeptListCommand(), newKeptRemoveCommand())
	return c
}

func newKeptListCommand() *cobra.Command {
	var f keptFlags
	c := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "list the sandboxes paddock run left on this host, with their workspaces",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			r, user, err := f.runner(c)
			if err != nil {
				return err
			}
			kept, err := r.ListKept(user)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tWORKSPACE")
			for _, k := range kept {
				state, ws := "stopped", k.Workspace
				if k.Running {
					state = "running"
				}
				if ws == "" {
					ws = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", k.ID, state, ws)
			}
			return tw.Flush()
		},
	}
	f.add(c)
	return c
}

func newKeptRemoveCommand() *cobra.Command {
	var f keptFlags
	var all bool
	c := &cobra.Command{
		Use:   "rm SANDBOX... | --all",
		Short: "end sandboxes paddock run left, and delete their disks and temporary workspaces",
		Long: `rm ends each sandbox's processes and deletes what paddock made for it: its runtime
state, cgroup, disk image and temporary workspace. A directory given to paddock run with
--workspace is the user's own and stays. --all removes every sandbox paddock kept ls lists.`,
		RunE: func(c *cobra.Command, args []string) error {
			if all == (len(args) > 0) {
				return fmt.Errorf("kept rm: give sandbox IDs or --all, not both nor neither: %w", errdefs.ErrInvalidArgument)
			}
			r, user, err := f.runner(c)
			if err != nil {
				return err
			}
			if all {
				kept, err := r.ListKept(user)
				if err != nil {
					return err
				}
				for _, k := range kept {
					args = append(args, k.ID)
				}
			}
			var failed []error
			for _, id := range args {
				if err := r.RemoveKept(context.Background(), user, id); err != nil {
					failed = append(failed, err)
					continue
				}
				fmt.Fprintf(c.OutOrStdout(), "removed %s\n", id)
			}
			switch {
			case len(failed) == 1 && len(args) == 1:
				return failed[0]
			case len(failed) > 0:
				for _, err := range failed {
					fmt.Fprintf(c.ErrOrStderr(), "paddock: %s\n", message(err))
				}
				return fmt.Errorf("kept rm: %d of %d sandboxes not removed: %w", len(failed), len(args), failed[0])
			}
			return nil
		},
	}
	f.add(c)
	c.Flags().BoolVar(&all, "all", false, "remove every sandbox paddock run left")
	return c
}
