package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/container"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

var echoHi = []string{"echo", "hi"}

// PaddockRun times the real CLI, `paddock run -- echo hi`, with its default configuration.
func (e *Env) PaddockRun(ctx context.Context) (Timing, error) {
	return timeEcho(command(ctx, e.Paddock, append([]string{"run", "--"}, echoHi...)...))
}

// RuncRun times a bare, foreground `runc run` of the bundle paddock would run, with
// `/bin/echo hi` in place of the agent. The bundle is written before the clock starts; how
// long that took is returned apart.
func (e *Env) RuncRun(ctx context.Context) (t Timing, bundle time.Duration, err error) {
	id := newID("bench-")
	dir := filepath.Join(e.Dir, "bundles", id)
	defer func() { err = errors.Join(err, e.runcDelete(ctx, id), os.RemoveAll(dir)) }()
	start := time.Now()
	if err := e.writeBundle(id, dir, []string{"/bin/echo", "hi"}); err != nil {
		return Timing{}, 0, err
	}
	bundle = time.Since(start)
	t, err = timeEcho(command(ctx, e.Runc, "--root", e.runcRoot, "run", "--bundle", dir, id))
	return t, bundle, err
}

func (e *Env) writeBundle(id, dir string, args []string) error {
	// 0711 as the runner's: the user namespace's root must reach the rootfs.
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	return container.WriteBundle(e.bundleConfig(id, dir), dir, "/paddock/"+id, args)
}

// runcDelete removes a baseline container; a foreground `runc run` usually has already.
func (e *Env) runcDelete(ctx context.Context, id string) error {
	out, err := command(ctx, e.Runc, "--root", e.runcRoot, "delete", "--force", id).CombinedOutput()
	if err != nil && !bytes.Contains(out, []byte("not exist")) {
		return fmt.Errorf("runc delete %s: %s", id, bytes.TrimSpace(out))
	}
	return nil
}

// PaddockVersion times `paddock version`: what starting the CLI's process costs.
func (e *Env) PaddockVersion(ctx context.Context) (Timing, error) {
	return timeOutput(command(ctx, e.Paddock, "version"), nil)
}

// ProcessStarts times, fork → exit, the starts of the processes on paddock's path besides
// runc's: paddock-agent given no envelope (it exits refusing it once its runtime and
// package initialisers have run, as every sandbox's agent does before its main),
// paddock-exec given no arguments (the trampoline the main command starts through), and
// /bin/true, the start of any process.
func (e *Env) ProcessStarts(ctx context.Context) (agent, trampoline, floor Timing, err error) {
	refused := func(t Timing, err error) (Timing, error) {
		var x *exec.ExitError
		if errors.As(err, &x) && x.ExitCode() > 0 {
			err = nil
		}
		return t, err
	}
	if agent, err = refused(timeOutput(command(ctx, e.Agent), nil)); err != nil {
		return
	}
	if trampoline, err = refused(timeOutput(command(ctx, filepath.Join(filepath.Dir(e.Agent), "paddock-exec")), nil)); err != nil {
		return
	}
	floor, err = timeOutput(command(ctx, "/bin/true"), nil)
	return
}

// timeEcho times cmd and checks that it printed what `echo hi` prints.
func timeEcho(cmd *exec.Cmd) (Timing, error) {
	var out bytes.Buffer
	t, err := timeOutput(cmd, &out)
	if err == nil && out.String() != "hi\n" {
		err = fmt.Errorf("%s printed %q, want \"hi\\n\"", cmd, out.String())
	}
	return t, err
}

// Phases split a run done in process through the runner, the CLI's work minus starting its
// own process.
type Phases struct {
	// Create is runner.Create: workspace, bundle, `runc run --detach`, dial.
	Create time.Duration
	// FirstByte and Exited are from Create's return to the main command's first output
	// and its exit status, through Attach (as the CLI does).
	FirstByte, Exited time.Duration
	// Destroy is Sandbox.Destroy.
	Destroy time.Duration
}

// RunnerRun runs `echo hi` as a sandbox's main command through the runner in process and
// times its phases.
func (e *Env) RunnerRun(ctx context.Context) (p Phases, err error) {
	start := time.Now()
	sb, err := e.Runner.Create(ctx, runner.Spec{User: benchUser, Main: echoHi})
	if err != nil {
		return p, err
	}
	p.Create = time.Since(start)
	defer func() {
		start := time.Now()
		err = errors.Join(err, sb.Destroy(context.WithoutCancel(ctx)))
		p.Destroy = time.Since(start)
	}()
	start = time.Now()
	var out []byte
	stream, err := sb.Agent().Process().Attach(ctx, &pb.AttachRequest{SessionId: wire.MainSessionID})
	if err != nil {
		return p, err
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			return p, fmt.Errorf("attach: %w", err)
		}
		switch ev := ev.Event.(type) {
		case *pb.ProcessEvent_Output:
			if p.FirstByte == 0 {
				p.FirstByte = time.Since(start)
			}
			out = append(out, ev.Output.GetData()...)
		case *pb.ProcessEvent_Exited:
			p.Exited = time.Since(start)
			if string(out) != "hi\n" || ev.Exited.GetExitCode() != 0 {
				return p, fmt.Errorf("main command printed %q and exited %v", out, ev.Exited)
			}
			return p, nil
		}
	}
}
