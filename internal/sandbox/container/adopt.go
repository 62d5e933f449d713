package container

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/sandbox"
)

// Adopt takes over a container this runtime started before the control plane restarted:
// it checks with the runtime that the container still runs, holds its first process by a
// pidfd, and dials the agent's socket again. Only runc's listening channel can be dialled
// again; runsc's channel is one connection that died with the process that held it (see
// channel.go), so its sandboxes cannot be adopted and are reaped instead.
//
// hostPorts are the Config.HostPorts it was started with: under runc the host listens on
// them again in the sandbox's network namespace. Failing to is logged, not fatal: the
// sandbox runs on without those services.
func (rt *Runtime) Adopt(ctx context.Context, id, dir string, hostPorts []int) (*Sandbox, error) {
	if rt.connected {
		return nil, fmt.Errorf("sandbox %s: a %s sandbox's channel was one connection, gone with the previous control plane: %w", id, rt.Name, errdefs.ErrUnavailable)
	}
	out, err := rt.command(ctx, "state", id).Output()
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %s state: %w", id, rt.Name, errdefs.ErrNotFound)
	}
	var st struct {
		Status string `json:"status"`
		Pid    int    `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("sandbox %s: %s state: %w", id, rt.Name, err)
	}
	if st.Status != "running" {
		return nil, fmt.Errorf("sandbox %s is %s, not running: %w", id, st.Status, errdefs.ErrFailedPrecondition)
	}
	if pid, err := readPid(filepath.Join(dir, "init.pid")); err != nil || pid != st.Pid {
		return nil, fmt.Errorf("sandbox %s: the runtime's pid %d is not the one paddock started: %w", id, st.Pid, errdefs.ErrFailedPrecondition)
	}
	pidfd, err := unix.PidfdOpen(st.Pid, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: hold its first process: %w", id, err)
	}
	sb := &Sandbox{ID: id, rt: rt, dir: dir, cgroup: "/paddock/" + id, init: pidfd, idBase: heldIDRange(dir)}
	sb.watchExit()
	if sb.AgentConn, err = sandbox.Dial(filepath.Join(dir, "agent.sock")); err != nil {
		unix.Close(pidfd)
		return nil, err
	}
	if !rt.userKernel && len(hostPorts) > 0 {
		hn, err := adoptHostNet(st.Pid, pidfd, hostPorts)
		if err != nil {
			rt.Log.Warn("adopted sandbox: the host's services may be unavailable in it", "sandbox", id, "err", err)
		}
		sb.net = hn
	}
	return sb, nil
}

// Reap removes what is left of a container that cannot be adopted: its processes, the
// runtime's record, its cgroup and its directory. It never touches the workspace.
func (rt *Runtime) Reap(ctx context.Context, id, dir string) error {
	sb := &Sandbox{ID: id, rt: rt, dir: dir, cgroup: "/paddock/" + id, init: -1}
	if pid, err := readPid(filepath.Join(dir, "init.pid")); err == nil {
		if fd, err := unix.PidfdOpen(pid, 0); err == nil && rt.owns(ctx, id, pid) {
			sb.init = fd
		} else if err == nil {
			unix.Close(fd)
		}
	}
	return sb.Destroy(ctx)
}

// Knows reports whether the runtime has a record of container id.
func (rt *Runtime) Knows(ctx context.Context, id string) bool {
	return rt.command(ctx, "state", id).Run() == nil
}

// owns reports whether the runtime still knows container id with first process pid, so
// that a pid reused by some other process is never killed.
func (rt *Runtime) owns(ctx context.Context, id string, pid int) bool {
	out, err := rt.command(ctx, "state", id).Output()
	if err != nil {
		return false
	}
	var st struct {
		Pid int `json:"pid"`
	}
	return json.Unmarshal(out, &st) == nil && st.Pid == pid
}

// Running reports whether the container whose state directory is dir still has its first
// process, and it has not exited (a zombie is waiting for whichever process adopted it to
// reap it). A pid reused by another process reads as running: for display, not for a kill.
func Running(dir string) bool {
	pid, err := readPid(filepath.Join(dir, "init.pid"))
	if err != nil || pid <= 0 {
		return false
	}
	f, err := ProcStat(pid)
	return err == nil && f[0] != "Z" && f[0] != "X"
}

// ProcStat is the fields of /proc/PID/stat after the command's name: the process's state
// first (field 3), its start time 20th (field 22).
func ProcStat(pid int) ([]string, error) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	// pid (comm) state ...: comm may hold anything, so the fields follow its last ')'.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 20 {
		return nil, fmt.Errorf("/proc/%d/stat: %d fields after the command", pid, len(f))
	}
	return f, nil
}

func readPid(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(data)))
}
