// Command paddock-agent runs inside every sandbox: it reads its bootstrap envelope on stdin
// and serves the agent RPC on the socket the envelope names (a listening socket, or with
// --connected one connected socket; with --pod DIR, in a pod on a cluster, a TCP address with
// mutual TLS and the envelope in DIR). As PID 1 of a microVM with --vm-init it sets up the
// guest and serves on the VM's virtio-serial port instead. `paddock-agent welcome` runs the
// default app of a new sandbox instead (package welcome). It is built static
// (CGO_ENABLED=0) so that it runs in any root filesystem. `paddock-agent secret get NAME`,
// run by a process in the sandbox, asks the secrets broker for a capability. `paddock-agent
// code MESSAGE` runs a turn of the coding agent (package agent/coder) as the sandbox user. With
// --exec-limited it is the trampoline through which the agent starts a command under the
// sandbox's file size limit (session.ExecLimited). `paddock-agent fork-history`, run by the
// host, forks a sandbox's history store (history.ForkMain).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/paddockhq/paddock/internal/agent"
	"github.com/paddockhq/paddock/internal/agent/coder"
	"github.com/paddockhq/paddock/internal/agent/history"
	"github.com/paddockhq/paddock/internal/agent/session"
	"github.com/paddockhq/paddock/internal/agent/welcome"
	"github.com/paddockhq/paddock/internal/brokerclient"
	"github.com/paddockhq/paddock/internal/wire"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == session.LimitedExecFlag {
		// The trampoline of a command under the sandbox's limits: nothing else runs first.
		code, err := session.ExecLimited(os.Args[2:])
		fmt.Fprintf(os.Stderr, "paddock-agent: %v\n", err)
		os.Exit(code)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := run(ctx, log)
	signalled := ctx.Err() != nil
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "paddock-agent: %v\n", err)
		os.Exit(1)
	}
	if signalled && inPod() {
		// Ended from outside (a stop, an eviction, a deletion): exit as the signal would,
		// so that the kubelet reports the pod Failed. It keeps an eviction's reason only
		// then, not when the pod Succeeded.
		os.Exit(128 + int(syscall.SIGTERM))
	}
}

// inPod says whether the agent runs as a pod's entrypoint.
func inPod() bool {
	return len(os.Args) > 2 && (os.Args[1] == wire.PodFlag || os.Args[1] == wire.PodWarmFlag)
}

// run runs the agent, or the subcommand its arguments name, until ctx ends.
func run(ctx context.Context, log *slog.Logger) error {
	if os.Getpid() == 1 && len(os.Args) > 1 && os.Args[1] == wire.VMInitFlag {
		// PID 1 exiting panics the guest kernel, which ends the VM (panic=-1, -no-reboot).
		err := agent.VMInit(ctx, log)
		if err == nil {
			err = errors.New("the guest's init returned")
		}
		log.Error("agent failed", "err", err)
		return err
	}
	if len(os.Args) > 1 && os.Args[1] == wire.WelcomeSubcommand {
		return welcome.Main(ctx, os.Args[2:], log)
	}
	if len(os.Args) > 1 && os.Args[1] == coder.Subcommand {
		return coder.Main(ctx, os.Args[2:], os.Stdout)
	}
	if len(os.Args) > 1 && os.Args[1] == wire.ForkHistorySubcommand {
		return history.ForkMain(os.Args[2:], os.Stdout)
	}
	if len(os.Args) > 1 && os.Args[1] == "secret" {
		return brokerclient.Main(ctx, os.Args[2:], os.Stdout)
	}
	if len(os.Args) > 2 && os.Args[1] == wire.PodWarmFlag {
		if err := agent.BootstrapWarmPod(ctx, os.Args[2], log); err != nil {
			log.Error("agent failed", "err", err)
			return err
		}
		return nil
	}
	if len(os.Args) > 2 && os.Args[1] == wire.PodFlag {
		if err := agent.BootstrapPod(ctx, os.Args[2], log); err != nil {
			log.Error("agent failed", "err", err)
			return err
		}
		return nil
	}
	connected := len(os.Args) > 1 && os.Args[1] == wire.ConnectedFlag
	if err := agent.Bootstrap(ctx, os.Stdin, connected, confine(log), log); err != nil {
		log.Error("agent failed", "err", err)
		return err
	}
	return nil
}
