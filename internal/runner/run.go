package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// Stdio connects a run to its caller.
type Stdio struct {
	// Stdin is forwarded to the main command; nil closes its stdin at once.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Signals are forwarded to the main command's process group.
	Signals <-chan os.Signal
}

// Result tells how a run ended.
type Result struct {
	// Code is the command's exit code, or -1 when a signal ended it.
	Code int
	// Signal is the signal that ended the command, or 0.
	Signal int
	// OOM is set when the memory limit killed the command.
	OOM bool
	// OOMKills counts processes the memory limit killed during the run.
	OOMKills uint64
	// TimedOut is set when the timeout ended the run.
	TimedOut bool
	// DiskFull is set when the sandbox's disk limit was reached by the end of the run
	// (Sandbox.DiskFull): a write past it failed with ENOSPC.
	DiskFull bool
	// StartError says why the command could not be started (Code is 126 or 127).
	StartError string
	// Sandbox is the sandbox the command ran in, and Limits what it ran under.
	Sandbox string
	Limits  wire.Limits
}

// ExitCode maps a result to the `paddock run` contract: the command's own code; 128+N for
// signal N; 124 for a timeout; 137 for the memory limit.
func (r Result) ExitCode() int {
	switch {
	case r.TimedOut:
		return 124
	case r.OOM:
		return 137
	case r.Signal > 0:
		return 128 + r.Signal
	}
	return r.Code
}

// Run creates a sandbox for spec, runs its main command with stdio attached, and destroys
// the sandbox afterwards unless keep is set.
func (r *Runner) Run(ctx context.Context, spec Spec, stdio Stdio, keep bool) (res Result, err error) {
	if len(spec.Main) == 0 {
		return Result{}, fmt.Errorf("no command given: %w", errdefs.ErrInvalidArgument)
	}
	sb, err := r.Create(ctx, spec)
	if err != nil {
		return Result{}, err
	}
	res.Sandbox, res.Limits = sb.ID, sb.Limits
	r.log.Debug("sandbox started", "sandbox", sb.ID)
	r.claimRun(sb.ID)
	defer func() {
		if keep {
			r.releaseRun(sb.ID)
		} else {
			if derr := sb.Destroy(context.WithoutCancel(ctx)); derr != nil {
				r.log.Warn("destroy sandbox", "sandbox", sb.ID, "err", derr)
			}
			r.log.Debug("sandbox destroyed", "sandbox", sb.ID)
		}
	}()
	// The host owns the timeout: a timer cancels the attach and says that it fired. (A
	// deadline on the context would travel to the agent with the stream, and the agent's
	// copy can expire first, which reads here as an error rather than a timeout.)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var timedOut atomic.Bool
	if sb.Limits.Timeout > 0 {
		t := time.AfterFunc(sb.Limits.Timeout, func() { timedOut.Store(true); cancel() })
		defer t.Stop()
	}
	status, err := attachMain(runCtx, sb.agent.Process(), stdio)
	r.log.Debug("main command ended", "sandbox", sb.ID, "err", err)
	res.OOMKills, _ = sb.OOMKills()
	res.DiskFull = sb.DiskFull()
	switch {
	case err == nil:
		res.Code, res.Signal, res.StartError = int(status.GetExitCode()), int(status.GetSignal()), status.GetError()
		res.OOM = res.OOMKills > 0 && res.Signal == int(syscall.SIGKILL)
	case res.OOMKills > 0:
		res.OOM = true // the limit took the agent down with the command
	case timedOut.Load():
		res.TimedOut = true
	case errors.Is(err, errdefs.ErrUnavailable):
		return res, fmt.Errorf("sandbox %s: the agent is not answering (%v); its last error: %s: %w", sb.ID, err, sb.backend.LastError(), errdefs.ErrUnavailable)
	default:
		return res, fmt.Errorf("sandbox %s: %w", sb.ID, err)
	}
	return res, nil
}

// attachMain streams the main session's output to stdio until it exits, feeding it stdin and
// forwarding signals meanwhile.
func attachMain(ctx context.Context, c pb.ProcessClient, stdio Stdio) (*pb.ExitStatus, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Attach(ctx, &pb.AttachRequest{SessionId: wire.MainSessionID})
	if err != nil {
		return nil, errdefs.FromGRPC(err)
	}
	go forwardStdin(ctx, c, stdio.Stdin)
	go forwardSignals(ctx, c, stdio.Signals)
	for {
		ev, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, errdefs.FromGRPC(err)
		}
		switch e := ev.Event.(type) {
		case *pb.ProcessEvent_Output:
			w := stdio.Stdout
			if e.Output.GetStream() == pb.Stream_STREAM_STDERR {
				w = stdio.Stderr
			}
			if _, err := w.Write(e.Output.GetData()); err != nil && !errors.Is(err, syscall.EPIPE) {
				return nil, fmt.Errorf("write output: %w", err)
			}
		case *pb.ProcessEvent_Exited:
			return e.Exited, nil
		}
	}
}

// stdinChunk is how much of stdin one WriteStdin carries.
const stdinChunk = 256 << 10

func forwardStdin(ctx context.Context, c pb.ProcessClient, in io.Reader) {
	if in == nil {
		_, _ = c.WriteStdin(ctx, &pb.WriteStdinRequest{SessionId: wire.MainSessionID, Close: true})
		return
	}
	buf := make([]byte, stdinChunk)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			if _, werr := c.WriteStdin(ctx, &pb.WriteStdinRequest{SessionId: wire.MainSessionID, Data: buf[:n]}); werr != nil {
				return // the command closed its stdin or exited
			}
		}
		if err != nil {
			_, _ = c.WriteStdin(ctx, &pb.WriteStdinRequest{SessionId: wire.MainSessionID, Close: true})
			return
		}
	}
}

func forwardSignals(ctx context.Context, c pb.ProcessClient, sigs <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-sigs:
			if n, ok := s.(syscall.Signal); ok {
				sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, _ = c.SendSignal(sctx, &pb.SendSignalRequest{SessionId: wire.MainSessionID, Signal: int32(n)})
				cancel()
			}
		}
	}
}
