package bench

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// headArgs makes `head -c n /dev/zero`: n bytes on stdout as fast as the kernel gives them.
func headArgs(n int64) []string { return []string{"head", "-c", fmt.Sprint(n), "/dev/zero"} }

// PaddockStream times n bytes of stdout from a sandbox to the CLI's stdout, a pipe.
func (e *Env) PaddockStream(ctx context.Context, n int64) (Timing, error) {
	return timeStream(command(ctx, e.Paddock, append([]string{"run", "--"}, headArgs(n)...)...), n)
}

// HostStream times the same command run directly on the host: the ceiling of a pipe here.
func (e *Env) HostStream(ctx context.Context, n int64) (Timing, error) {
	args := headArgs(n)
	return timeStream(command(ctx, args[0], args[1:]...), n)
}

// RelayStream times the same command's output relayed by two processes through pipes
// (`head | cat | cat`): the floor of any design that carries a sandbox's output through a
// process inside and a client outside, as paddock's agent and CLI do.
func (e *Env) RelayStream(ctx context.Context, n int64) (Timing, error) {
	return timeStream(command(ctx, "sh", "-c", strings.Join(headArgs(n), " ")+" | cat | cat"), n)
}

// Stream times `podman run --rm` of the same command, its output relayed by conmon and
// podman's attach.
func (p *podmanPeer) Stream(ctx context.Context, e *Env, n int64) (Timing, error) {
	return timeStream(command(ctx, p.bin, p.runArgs(e, headArgs(n), "--rm")...), n)
}

func timeStream(cmd *exec.Cmd, n int64) (Timing, error) {
	t, err := timeOutput(cmd, nil)
	if err == nil && t.Bytes != n {
		err = fmt.Errorf("%s: %d bytes arrived, want %d", cmd, t.Bytes, n)
	}
	return t, err
}

// RunnerStream streams n bytes from a sandbox's main command to the harness in process, as
// the CLI does but without the CLI's own stdout, and reads the CPU time the agent used.
func (e *Env) RunnerStream(ctx context.Context, n int64) (t Timing, agentCPU time.Duration, err error) {
	start := time.Now()
	sb, err := e.Runner.Create(ctx, runner.Spec{User: benchUser, Main: headArgs(n)})
	if err != nil {
		return t, 0, err
	}
	defer func() { err = errors.Join(err, sb.Destroy(context.WithoutCancel(ctx))) }()
	stream, err := sb.Agent().Process().Attach(ctx, &pb.AttachRequest{SessionId: wire.MainSessionID})
	if err != nil {
		return t, 0, err
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			return t, 0, fmt.Errorf("attach: %w", err)
		}
		if out := ev.GetOutput(); out != nil {
			if t.Bytes == 0 {
				t.First = time.Since(start)
			}
			t.Bytes += int64(len(out.GetData()))
		}
		if ev.GetExited() != nil {
			t.Last = time.Since(start)
			break
		}
	}
	if t.Bytes != n {
		return t, 0, fmt.Errorf("%d bytes arrived, want %d", t.Bytes, n)
	}
	pid, err := agentPid(sb.Cgroup())
	if err != nil {
		return t, 0, err
	}
	agentCPU, err = processCPU(pid)
	return t, agentCPU, err
}

// processCPU is the user and system time a process has used so far.
func processCPU(pid int) (time.Duration, error) {
	stat := readFile(fmt.Sprintf("/proc/%d/stat", pid))
	// The command name, in parentheses, may hold spaces: fields count from after it.
	_, rest, ok := strings.Cut(stat, ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, stat)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	const userHZ = 100 // USER_HZ, fixed at 100 on Linux
	return time.Duration(utime+stime) * time.Second / userHZ, nil
}
