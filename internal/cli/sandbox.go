package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

func newSandboxCommand(code *int) *cobra.Command {
	c := &cobra.Command{
		Use:     "sandbox",
		Aliases: []string{"sandboxes", "sb"},
		Short:   "manage your sandboxes on a paddock server (paddock login first)",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return fmt.Errorf("sandbox: give a subcommand (see paddock sandbox --help): %w", errdefs.ErrInvalidArgument)
		},
	}
	c.AddCommand(newSandboxListCommand(), newSandboxCreateCommand(), newSandboxGetCommand(), newSandboxRemoveCommand(), newSandboxForkCommand(),
		newLifecycleCommand("stop", "stop a sandbox, keeping its workspace", (*paddock.Sandbox).Stop),
		newLifecycleCommand("start", "start a stopped sandbox", (*paddock.Sandbox).Start),
		newLifecycleCommand("restart", "stop and start a sandbox", (*paddock.Sandbox).Restart),
		newExecCommand(code), newShellCommand(code), newFilesCommand(), newCopyCommand(), newSandboxPolicyCommand(), newSandboxAppCommand(), newCapabilityCommand())
	return c
}

// withClient runs f with a signed-in client and a context that bounds a request.
func withClient(f func(ctx context.Context, cl *paddock.Client) error) error {
	cl, err := connect()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	return f(ctx, cl)
}

func newSandboxListCommand() *cobra.Command {
	var all bool
	c := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "list your sandboxes",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				list, err := cl.Sandboxes.List(ctx, all)
				if err != nil {
					return err
				}
				printSandboxes(c.OutOrStdout(), list, all, time.Now())
				return nil
			})
		},
	}
	c.Flags().BoolVarP(&all, "all", "a", false, "every user's sandboxes (admins)")
	return c
}

// printSandboxes lists sandboxes as a table; a NODE column is there when any of them runs
// on a cluster node.
func printSandboxes(w io.Writer, list []api.Sandbox, owners bool, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := "ID\tNAME\tROLE\tSTATE\tTIER\tMEMORY\tAGE"
	nodes := slices.ContainsFunc(list, func(sb api.Sandbox) bool { return sb.Node != "" })
	if nodes {
		header += "\tNODE"
	}
	if owners {
		header += "\tOWNER"
	}
	fmt.Fprintln(tw, header)
	for _, sb := range list {
		line := strings.Join([]string{sb.ID, dash(sb.Name), dash(sb.Role), sb.State, dash(sb.Tier), size(sb.Limits.MemoryBytes), age(now.Sub(sb.CreatedAt))}, "\t")
		if nodes {
			line += "\t" + dash(sb.Node)
		}
		if owners {
			line += "\t" + dash(sb.OwnerName)
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// size is a byte count in the units --memory takes (512M, 1.5G).
func size(n int64) string {
	if n <= 0 {
		return "-"
	}
	for _, u := range []struct {
		suffix string
		bytes  int64
	}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n >= u.bytes {
			return strings.TrimSuffix(strconv.FormatFloat(float64(n)/float64(u.bytes), 'f', 1, 64), ".0") + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// age is a duration as one rounded unit: 40s, 5m, 3h, 2d.
func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", max(int(d.Seconds()), 0))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

type createFlags struct {
	name, tier, runtime, memory, disk, build string
	cpus                                     float64
	pids                                     int64
	port                                     int
	env                                      []string
}

func newSandboxCreateCommand() *cobra.Command {
	var f createFlags
	c := &cobra.Command{
		Use:   "create [flags] [-- APP COMMAND...]",
		Short: "create and start a sandbox, and print its ID",
		Long: `create creates a sandbox and starts it. Its app is the agent's welcome page, or
APP COMMAND serving on --port inside the sandbox.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			req := api.CreateSandboxRequest{
				Name: f.name, Tier: f.tier, Runtime: f.runtime, Env: f.env,
				Limits: api.Limits{Memory: f.memory, CPUs: f.cpus, Pids: f.pids, Disk: f.disk},
				App:    api.Template{Command: args, Port: f.port, Build: f.build},
			}
			if f.port != 0 && len(args) == 0 {
				return fmt.Errorf("sandbox create: --port is the port of an app command; give one after --: %w", errdefs.ErrInvalidArgument)
			}
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				sb, err := cl.Sandboxes.CreateRequest(ctx, req)
				if err != nil {
					return err
				}
				fmt.Fprintln(c.OutOrStdout(), sb.ID)
				return failedState(sb.Info)
			})
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.name, "name", "", "a name for the sandbox")
	fl.StringVar(&f.tier, "tier", "", "isolation tier: container, microvm or process (default: the server's)")
	fl.StringVar(&f.runtime, "runtime", "", "OCI runtime of the container tier: runc or runsc")
	fl.StringVar(&f.memory, "memory", "", "memory limit, like 512M or 1G")
	fl.Float64Var(&f.cpus, "cpus", 0, "CPU limit in CPUs, fractional (like 0.5)")
	fl.Int64Var(&f.pids, "pids", 0, "limit the commands to `N` processes, the command itself and threads included (process tier: N to N+8; runsc: one more per further command running at once)")
	fl.StringVar(&f.disk, "disk", "", "disk limit of the workspace and /tmp together, like 2G (on a host a write past it fails with ENOSPC; on a cluster the pod is evicted)")
	fl.StringArrayVar(&f.env, "env", nil, "environment variable NAME=VALUE for the sandbox's processes (repeatable)")
	fl.IntVar(&f.port, "port", 0, "port the app command serves on inside the sandbox")
	fl.StringVar(&f.build, "build", "", "label of the runtime build the app serves")
	return c
}

// failedState is the error for a sandbox the server recorded but could not start.
func failedState(sb api.Sandbox) error {
	if sb.State != api.StateFailed {
		return nil
	}
	reason := sb.Error
	if reason == "" {
		reason = "no reason given"
	}
	return fmt.Errorf("sandbox %s failed to start: %s (start it again or remove it): %w", sb.ID, reason, errdefs.ErrUnavailable)
}

func newSandboxForkCommand() *cobra.Command {
	var at string
	c := &cobra.Command{
		Use:   "fork ID [--at CHECKPOINT]",
		Short: "make a new sandbox whose workspace and history start from a checkpoint of this one",
		Long:  "fork makes a new sandbox of yours like ID (tier, limits, environment, app) whose workspace\nand history start from CHECKPOINT (see paddock history ID); without --at, from the current\nstate, checkpointed first. With a transaction open in ID, the fork starts from the state\nbefore it, and says so. The history's stored contents are shared, not copied; the\nworkspace's files are the fork's own. It prints the new sandbox's ID.",
		Args:  exactArgs(1, "ID"),
		RunE: func(c *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				res, err := cl.Sandbox(args[0]).Fork(ctx, at)
				if err != nil {
					return err
				}
				if res.Note != "" {
					fmt.Fprintf(c.ErrOrStderr(), "note: %s\n", res.Note)
				}
				fmt.Fprintf(c.ErrOrStderr(), "forked %s at checkpoint %s\n", res.From, res.At)
				_, err = fmt.Fprintln(c.OutOrStdout(), res.Sandbox.ID)
				return err
			})
		},
	}
	c.Flags().StringVar(&at, "at", "", "the checkpoint to start from (default: the current state)")
	return c
}

func newSandboxGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "show a sandbox as JSON",
		Args:  exactArgs(1, "ID"),
		RunE: func(c *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				sb, err := cl.Sandbox(args[0]).Describe(ctx)
				if err != nil {
					return err
				}
				out, err := json.MarshalIndent(sb, "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(c.OutOrStdout(), "%s\n", out)
				return err
			})
		},
	}
}

func newSandboxRemoveCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "rm ID...",
		Aliases: []string{"delete"},
		Short:   "delete sandboxes and their workspaces",
		Args:    minArgs(1, "ID..."),
		RunE: func(c *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				var failed int
				for _, id := range args {
					if err := cl.Sandbox(id).Delete(ctx); err != nil {
						if len(args) == 1 {
							return err
						}
						failed++
						fmt.Fprintf(c.ErrOrStderr(), "paddock: %s\n", message(err))
						continue
					}
					fmt.Fprintln(c.OutOrStdout(), id)
				}
				if failed > 0 {
					return fmt.Errorf("%d of %d sandboxes not removed", failed, len(args))
				}
				return nil
			})
		},
	}
}

func newLifecycleCommand(name, short string, op func(*paddock.Sandbox, context.Context) (api.Sandbox, error)) *cobra.Command {
	return &cobra.Command{
		Use:   name + " ID",
		Short: short,
		Args:  exactArgs(1, "ID"),
		RunE: func(c *cobra.Command, args []string) error {
			return withClient(func(ctx context.Context, cl *paddock.Client) error {
				sb, err := op(cl.Sandbox(args[0]), ctx)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "%s %s\n", sb.ID, sb.State)
				return failedState(sb)
			})
		},
	}
}

// exactArgs and minArgs are cobra's, with messages in the taxonomy that show the usage.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) != n {
			return fmt.Errorf("%s: want %s, got %d argument(s) (see %s --help): %w", c.CommandPath(), what, len(args), c.CommandPath(), errdefs.ErrInvalidArgument)
		}
		return nil
	}
}

func minArgs(n int, what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) < n {
			return fmt.Errorf("%s: want %s (see %s --help): %w", c.CommandPath(), what, c.CommandPath(), errdefs.ErrInvalidArgument)
		}
		return nil
	}
}
