package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/runner"
)

// IdleMemory is what one idle sandbox holds, in bytes.
type IdleMemory struct {
	// AgentRSS is the agent's VmRSS; AgentAnon and AgentFile split it into its own memory
	// (heap, stacks) and mapped file pages (its binary).
	AgentRSS, AgentAnon, AgentFile int64
	// Cgroup is the sandbox cgroup's charge (memory.usage_in_bytes on v1, memory.current on
	// v2); CgroupAnon and CgroupFile split it into anonymous memory and page cache.
	Cgroup, CgroupAnon, CgroupFile int64
}

// IdleSandboxes creates n sandboxes with no main command, lets them idle for idle after
// their agents first answered, and reads what each holds.
func (e *Env) IdleSandboxes(ctx context.Context, n int, idle time.Duration) (mem []IdleMemory, err error) {
	var sbs []*runner.Sandbox
	defer func() {
		for _, sb := range sbs {
			err = errors.Join(err, sb.Destroy(context.WithoutCancel(ctx)))
		}
	}()
	for range n {
		sb, err := e.Runner.Create(ctx, runner.Spec{User: benchUser})
		if err != nil {
			return nil, err
		}
		sbs = append(sbs, sb)
		if _, err := sb.Agent().Info(ctx); err != nil {
			return nil, fmt.Errorf("sandbox %s: agent info: %w", sb.ID, err)
		}
	}
	select {
	case <-time.After(idle):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for _, sb := range sbs {
		m, err := readIdleMemory(sb.Cgroup())
		if err != nil {
			return nil, fmt.Errorf("sandbox %s: %w", sb.ID, err)
		}
		mem = append(mem, m)
	}
	return mem, nil
}

func readIdleMemory(cgroup string) (IdleMemory, error) {
	var m IdleMemory
	pid, err := agentPid(cgroup)
	if err != nil {
		return m, err
	}
	status := readFile(fmt.Sprintf("/proc/%d/status", pid))
	m.AgentRSS, m.AgentAnon, m.AgentFile = kB(status, "VmRSS"), kB(status, "RssAnon"), kB(status, "RssFile")
	m.Cgroup, m.CgroupAnon, m.CgroupFile, err = cgroupMemory(cgroup)
	return m, err
}

// cgroupMemory is a cgroup's memory charge and its anonymous and page-cache parts, from
// memory.current and memory.stat (v2) or memory.usage_in_bytes and memory.stat (v1).
func cgroupMemory(cgroup string) (charge, anon, file int64, err error) {
	if cgroups.DetectMode() == cgroups.V2 {
		dir := filepath.Join("/sys/fs/cgroup", cgroup)
		charge, err = readInt(filepath.Join(dir, "memory.current"))
		stat := readFile(filepath.Join(dir, "memory.stat"))
		return charge, statValue(stat, "anon"), statValue(stat, "file"), err
	}
	dir := filepath.Join("/sys/fs/cgroup/memory", cgroup)
	charge, err = readInt(filepath.Join(dir, "memory.usage_in_bytes"))
	stat := readFile(filepath.Join(dir, "memory.stat"))
	return charge, statValue(stat, "total_rss"), statValue(stat, "total_cache"), err
}

// agentPid finds the agent among the cgroup's processes (an idle sandbox holds nothing else).
func agentPid(cgroup string) (int, error) {
	g, err := cgroups.Load(cgroup)
	if err != nil {
		return 0, err
	}
	pids, err := g.Pids()
	if err != nil {
		return 0, err
	}
	for _, pid := range pids {
		if strings.TrimSpace(readFile(fmt.Sprintf("/proc/%d/comm", pid))) == "paddock-agent" {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no paddock-agent among the processes %v of cgroup %s", pids, cgroup)
}

// kB reads a "Key:   123 kB" line of /proc/<pid>/status, in bytes.
func kB(status, key string) int64 {
	v := scanField(strings.NewReader(status), key)
	n, _ := strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64)
	return n << 10
}

// statValue reads a "key value" line of a cgroup's memory.stat.
func statValue(stat, key string) int64 {
	for line := range strings.Lines(stat) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok && k == key {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// podmanIdle is what one idle podman container holds on the host: its conmon (the
// per-container monitor outside the container) and its one process, in bytes.
type podmanIdle struct {
	RSS, Anon int64
}

// Idle starts n detached containers of the image running `sleep infinity`, lets them
// idle for idle, and reads conmon's and the container process's VmRSS and RssAnon.
func (p *podmanPeer) Idle(ctx context.Context, e *Env, n int, idle time.Duration) (mem []podmanIdle, err error) {
	var ids []string
	defer func() {
		for _, id := range ids {
			_ = exec.Command(p.bin, append(p.global, "rm", "--force", "--time", "0", id)...).Run()
		}
	}()
	for range n {
		out, err := exec.CommandContext(ctx, p.bin, p.runArgs(e, []string{"sleep", "infinity"}, "-d")...).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("podman run -d: %v: %s", err, strings.TrimSpace(string(out)))
		}
		ids = append(ids, lastLine(out))
	}
	select {
	case <-time.After(idle):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for _, id := range ids {
		out, err := exec.CommandContext(ctx, p.bin, append(p.global, "inspect", "--format", "{{.State.ConmonPid}} {{.State.Pid}}", id)...).Output()
		if err != nil {
			return nil, fmt.Errorf("podman inspect %s: %w", id, err)
		}
		var m podmanIdle
		for _, pid := range strings.Fields(string(out)) {
			status := readFile("/proc/" + pid + "/status")
			if status == "" {
				return nil, fmt.Errorf("podman container %s: process %s is gone", id, pid)
			}
			m.RSS += kB(status, "VmRSS")
			m.Anon += kB(status, "RssAnon")
		}
		mem = append(mem, m)
	}
	return mem, nil
}

// lastLine is the last non-empty line of out, trimmed.
func lastLine(out []byte) string {
	lines := strings.Fields(strings.TrimSpace(string(out)))
	if len(lines) == 0 {
		return ""
	}
	return lines[len(lines)-1]
}
