package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/wire"
)

type runFlags struct {
	tier, runtime, workspace, memory, cpus, disk, config, user string
	pids                                                       int64
	timeout                                                    time.Duration
	env                                                        []string
	insecure, keep                                             bool
}

func newRunCommand(code *int, toServer func(*cobra.Command) error) *cobra.Command {
	var f runFlags
	c := &cobra.Command{
		Use:   "run [flags] -- COMMAND [ARG...]",
		Short: "run a command in a fresh sandbox and remove the sandbox afterwards",
		Long: `run creates a sandbox, runs COMMAND inside it through the in-sandbox agent with
stdout and stderr kept apart and stdin forwarded, and destroys the sandbox.

Exit status: the command's own; 128+N when signal N killed it; 124 when --timeout ended
it; 137 when the memory limit killed it; 125 when paddock itself could not run it.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("run: no command given (paddock run [flags] -- COMMAND [ARG...]): %w", errdefs.ErrInvalidArgument)
			}
			spec, cfg, err := f.spec(args)
			if err != nil {
				return err
			}
			if cfg.OnCluster() && !runner.ClusterLinked() {
				return toServer(c) // the Kubernetes backend is linked there
			}
			return runCommand(c, spec, cfg, f.keep, code)
		},
	}
	fl := c.Flags()
	fl.SetInterspersed(false)
	fl.StringVar(&f.tier, "tier", "", "isolation tier: container, microvm or process (default: container; microvm is opt-in; process needs --insecure)")
	fl.StringVar(&f.runtime, "runtime", "", "OCI runtime of the container tier: runc (default) or runsc")
	fl.BoolVar(&f.insecure, "insecure", false, "use the process tier: a host process under Landlock and seccomp, no namespaces")
	fl.StringVar(&f.workspace, "workspace", "", "directory bound read-write at /workspace (default: a fresh temporary one)")
	fl.StringVar(&f.memory, "memory", "", "memory limit, like 128M or 1.5G")
	fl.StringVar(&f.cpus, "cpus", "", "CPU limit in CPUs, fractional (like 0.5)")
	fl.Int64Var(&f.pids, "pids", 0, "limit the commands to `N` processes, the command itself and threads included (process tier: N to N+8; runsc: one more per further command running at once)")
	fl.StringVar(&f.disk, "disk", "", "disk limit of the workspace and /tmp together, like 2G (on a host a write past it fails with ENOSPC; on a cluster the pod is evicted)")
	fl.DurationVar(&f.timeout, "timeout", 0, "wall-clock limit, like 30s or 10m (exit status 124)")
	fl.StringArrayVar(&f.env, "env", nil, "set an environment variable NAME=VALUE in the sandbox (repeatable)")
	fl.BoolVar(&f.keep, "keep", false, "keep the sandbox after the command exits")
	fl.StringVar(&f.config, "config", "", "runner configuration file (YAML)")
	fl.StringVar(&f.user, "user", "", "user whose workspace tree and limits apply (default: $USER)")
	return c
}

func (f *runFlags) spec(args []string) (runner.Spec, runner.Config, error) {
	spec := runner.Spec{Insecure: f.insecure, Runtime: f.runtime, Workspace: f.workspace, Env: f.env, Main: args, User: f.user}
	var err error
	if f.tier != "" {
		if spec.Tier, err = wire.ParseTier(f.tier); err != nil {
			return spec, runner.Config{}, fmt.Errorf("--tier: %w", err)
		}
	}
	if f.memory != "" {
		if spec.Limits.Memory, err = wire.ParseSize(f.memory); err != nil {
			return spec, runner.Config{}, fmt.Errorf("--memory: %w", err)
		}
	}
	if f.disk != "" {
		if spec.Limits.Disk, err = wire.ParseSize(f.disk); err != nil {
			return spec, runner.Config{}, fmt.Errorf("--disk: %w", err)
		}
	}
	if f.cpus != "" {
		if spec.Limits.CPUs, err = strconv.ParseFloat(f.cpus, 64); err != nil || spec.Limits.CPUs <= 0 {
			return spec, runner.Config{}, fmt.Errorf("--cpus: %q is not a positive number of CPUs: %w", f.cpus, errdefs.ErrInvalidArgument)
		}
	}
	spec.Limits.Pids, spec.Limits.Timeout = f.pids, f.timeout
	if err := spec.Limits.Validate("--"); err != nil {
		return spec, runner.Config{}, err
	}
	if spec.User == "" {
		spec.User = defaultUser()
	}
	cfg, err := runner.LoadConfig(f.config)
	return spec, cfg, err
}

func defaultUser() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "local"
}

func runCommand(c *cobra.Command, spec runner.Spec, cfg runner.Config, keep bool, code *int) error {
	stderr := c.ErrOrStderr()
	r := runner.New(cfg, logger(stderr))
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	stdio := runner.Stdio{Stdin: c.InOrStdin(), Stdout: c.OutOrStdout(), Stderr: stderr, Signals: sigs}
	res, err := r.Run(context.Background(), spec, stdio, keep)
	if err != nil {
		return err
	}
	switch {
	case res.TimedOut:
		fmt.Fprintf(stderr, "paddock: timed out after %s\n", res.Limits.Timeout)
	case res.OOM:
		fmt.Fprintf(stderr, "paddock: out of memory (limit %s)\n", res.Limits.Memory)
	case res.OOMKills > 0:
		fmt.Fprintf(stderr, "paddock: %d process(es) killed for running out of memory (limit %s)\n", res.OOMKills, res.Limits.Memory)
	case res.StartError != "":
		fmt.Fprintf(stderr, "paddock: %s\n", res.StartError)
	case res.DiskFull:
		fmt.Fprintf(stderr, "paddock: the sandbox's disk is full (limit %s): writes past it failed with ENOSPC\n", res.Limits.Disk)
	}
	if keep {
		fmt.Fprintf(stderr, "paddock: kept sandbox %s (paddock kept rm %s ends and removes it)\n", res.Sandbox, res.Sandbox)
	}
	*code = res.ExitCode()
	return nil
}
