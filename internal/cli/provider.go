package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

const appHelp = "Each step runs inside the sandbox (the dev one when none is named), under its\n" +
	"policy and limits, and prints its commands and their output as they finish. The\n" +
	"runtime (static, node, go or rust) is the one that recognises the project in --dir."

func newAppCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "app",
		Short: "make, build, validate, package and preview a project in a sandbox",
		Long:  "app runs a runtime provider's steps on the project in a sandbox's workspace.\n\n" + appHelp,
	}
	c.AddCommand(newAppNewCommand(), newAppSetCommand(), newAppResetCommand(), newAppArtifactsCommand(), newAppDownloadCommand(), newAppReleaseCommand())
	for _, s := range []struct{ step, short string }{
		{api.StepBuild, "fetch the project's dependencies and build it"},
		{api.StepValidate, "run the project's tests, lint and checks"},
		{api.StepPackage, "validate the project and archive its build output"},
		{api.StepPreview, "fetch the dependencies and serve the project's dev server as the sandbox's app"},
		{api.StepClean, "remove what the steps left (dependencies, build output)"},
	} {
		c.AddCommand(newAppStepCommand(s.step, s.short))
	}
	return c
}

func newAppNewCommand() *cobra.Command {
	var req api.ProviderRequest
	c := &cobra.Command{
		Use:   "new NAME [SANDBOX]",
		Short: "scaffold a new project and fetch its dependencies",
		Long:  "new writes a runtime's template into --dir (default: NAME) and fetches its dependencies.\n\n" + appHelp,
		Args:  rangeArgs(1, 2, "NAME [SANDBOX]"),
		RunE: func(c *cobra.Command, args []string) error {
			req.Name = args[0]
			if req.Dir == "" {
				req.Dir = args[0]
			}
			return runAppStep(c.OutOrStdout(), api.StepNew, args[1:], req)
		},
	}
	c.Flags().StringVar(&req.Runtime, "runtime", "", "the runtime: static, node, go or rust")
	c.Flags().StringVar(&req.Dir, "dir", "", "the project's directory in the workspace (default: NAME)")
	stepTimeoutFlag(c, &req)
	return c
}

func newAppStepCommand(step, short string) *cobra.Command {
	var req api.ProviderRequest
	c := &cobra.Command{
		Use:   step + " [SANDBOX]",
		Short: short,
		Long:  step + ": " + short + ".\n\n" + appHelp,
		Args:  rangeArgs(0, 1, "[SANDBOX]"),
		RunE: func(c *cobra.Command, args []string) error {
			return runAppStep(c.OutOrStdout(), step, args, req)
		},
	}
	c.Flags().StringVar(&req.Runtime, "runtime", "", "the runtime, when more than one would recognise the project")
	c.Flags().StringVar(&req.Dir, "dir", "", "the project's directory in the workspace (default: the workspace)")
	stepTimeoutFlag(c, &req)
	return c
}

// stepTimeoutFlag adds --timeout, the bound on each of the step's commands, to c; it sets
// req.TimeoutSeconds before c runs.
func stepTimeoutFlag(c *cobra.Command, req *api.ProviderRequest) {
	var d time.Duration
	c.Flags().DurationVar(&d, "timeout", 0, fmt.Sprintf("the time limit of each of the step's commands, whole seconds up to %s (default %s)", api.MaxStepTimeout, api.DefaultStepTimeout))
	c.PreRunE = func(*cobra.Command, []string) error {
		if d < 0 || d > api.MaxStepTimeout || d%time.Second != 0 {
			return fmt.Errorf("--timeout %s: want whole seconds up to %s: %w", d, api.MaxStepTimeout, errdefs.ErrInvalidArgument)
		}
		req.TimeoutSeconds = int(d / time.Second)
		return nil
	}
}

func runAppStep(w io.Writer, step string, args []string, req api.ProviderRequest) error {
	return withClient(func(ctx context.Context, cl *paddock.Client) error {
		id, err := sandboxOrDev(ctx, cl, args)
		if err != nil {
			return err
		}
		_, tty := terminal(w)
		_, err = cl.AppStep(ctx, id, step, req, func(ev api.ProviderEvent) { printProviderEvent(w, ev, tty) })
		return err
	})
}

// sandboxOrDev is the sandbox named, or the user's dev sandbox.
func sandboxOrDev(ctx context.Context, cl *paddock.Client, args []string) (string, error) {
	if len(args) > 0 {
		return args[0], nil
	}
	roles, err := cl.Roles(ctx)
	if err != nil {
		return "", err
	}
	if roles.Dev.ID == "" {
		return "", fmt.Errorf("no dev sandbox: name the sandbox to use: %w", errdefs.ErrFailedPrecondition)
	}
	return roles.Dev.ID, nil
}

// printProviderEvent writes one event as a line: a step's command as it starts (with a
// bar of the step's commands on a terminal), how it failed, its output indented, and the
// result.
func printProviderEvent(w io.Writer, ev api.ProviderEvent, tty bool) {
	switch ev.Type {
	case api.EventProgress:
		switch ev.State {
		case "running":
			bar := ""
			if tty && ev.Total > 0 {
				bar = "[" + strings.Repeat("#", ev.Index-1) + ">" + strings.Repeat(".", ev.Total-ev.Index) + "] "
			}
			fmt.Fprintf(w, "==> %s%s [%d/%d] %s\n", bar, ev.Step, ev.Index, ev.Total, ev.Command)
		case "failed":
			fmt.Fprintf(w, "    failed: %s\n", ev.Error)
		}
	case api.EventLog:
		fmt.Fprintf(w, "    %s\n", ev.Line)
	case api.EventResult:
		if ev.Error != "" {
			return // the command's error says it
		}
		fmt.Fprintf(w, "%s: done (%s project in %s)\n", ev.Step, ev.Runtime, ev.Dir)
		if ev.Artifact != "" {
			fmt.Fprintf(w, "package: %s\n", ev.Artifact)
		}
		if ev.ArtifactID != "" {
			fmt.Fprintf(w, "artifact: %s (paddock app download %s)\n", ev.ArtifactID, ev.ArtifactID)
		}
		if pv := ev.Preview; pv != nil {
			reload := "restarted on change"
			if pv.HotReload {
				reload = "reloads changes by itself"
			}
			fmt.Fprintf(w, "dev server: %s on port %d (%s)\n", strings.Join(pv.Command, " "), pv.Port, reload)
		}
		if ev.URL != "" {
			fmt.Fprintf(w, "served at %s\n", ev.URL)
		}
	}
}

func rangeArgs(lo, hi int, what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) < lo || len(args) > hi {
			return fmt.Errorf("%s: want %s, got %d argument(s) (see %s --help): %w", c.CommandPath(), what, len(args), c.CommandPath(), errdefs.ErrInvalidArgument)
		}
		return nil
	}
}

func newAppSetCommand() *cobra.Command {
	var t api.Template
	c := &cobra.Command{
		Use:   "set [SANDBOX] --port PORT -- COMMAND [ARG...]",
		Short: "run your own command as the sandbox's app, served on PORT",
		Long: "set makes COMMAND the sandbox's app (the dev sandbox when none is named) and restarts\n" +
			"the sandbox on it. The agent keeps it running, restarting it when it exits. With\n" +
			"--hot-reload an undo or restore does not restart it (for a dev server that reloads\n" +
			"changed files itself). paddock app reset goes back to the server's default app.",
		Args: minArgs(1, "COMMAND after --"),
		RunE: func(c *cobra.Command, args []string) error {
			sandbox := args[:0]
			if n := c.ArgsLenAtDash(); n > 0 {
				sandbox, args = args[:n], args[n:]
			}
			if len(sandbox) > 1 || len(args) == 0 {
				return fmt.Errorf("%s: want [SANDBOX] -- COMMAND [ARG...] (see %s --help): %w", c.CommandPath(), c.CommandPath(), errdefs.ErrInvalidArgument)
			}
			t.Command = args
			return setApp(c.OutOrStdout(), sandbox, t)
		},
	}
	c.Flags().IntVar(&t.Port, "port", 8080, "the port the command serves on, inside the sandbox")
	c.Flags().StringVar(&t.Dir, "dir", "", "the directory it runs in, relative to the workspace")
	c.Flags().BoolVar(&t.HotReload, "hot-reload", false, "it reloads changed files itself: an undo does not restart it")
	return c
}

func newAppResetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "reset [SANDBOX]",
		Short: "run the server's default app in the sandbox again",
		Args:  rangeArgs(0, 1, "[SANDBOX]"),
		RunE: func(c *cobra.Command, args []string) error {
			return setApp(c.OutOrStdout(), args, api.Template{})
		},
	}
}

func setApp(w io.Writer, args []string, t api.Template) error {
	return withClient(func(ctx context.Context, cl *paddock.Client) error {
		id, err := sandboxOrDev(ctx, cl, args)
		if err != nil {
			return err
		}
		sb, err := cl.SetApp(ctx, id, t)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s runs %s on port %d\n", sb.ID, strings.Join(sb.App.Command, " "), sb.App.Port)
		return nil
	})
}
