package runner

import (
	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/sandbox"
	"github.com/paddockhq/paddock/internal/sandbox/container"
	"github.com/paddockhq/paddock/internal/wire"
)

// containerEnv is a container's default environment, then extra ("K=V", later wins). None
// of it comes from paddock's own environment: nothing of the host leaks in.
func containerEnv(extra []string) []string {
	env := []string{
		"PATH=" + sandbox.DefaultPath,
		"HOME=/tmp",
		"USER=sandbox",
		"LOGNAME=sandbox",
		"LANG=C.UTF-8",
		"TMPDIR=/tmp",
	}
	return append(env, extra...)
}

func (l Limits) container() container.Limits {
	return container.Limits{MemoryBytes: int64(l.Memory), CPUs: l.CPUs, Pids: l.cgroupPids(), TmpBytes: int64(l.Tmp), CommandPids: l.Pids}
}

func (l Limits) cgroup() cgroups.Limits {
	return cgroups.Limits{MemoryBytes: int64(l.Memory), CPUs: l.CPUs, Pids: l.cgroupPids()}
}

// cgroupPids is the cgroup's pids limit: what the user asked for, plus the agent's own
// threads, so that --pids N leaves N processes to the user's commands. Under runc on
// cgroup v1 the commands' own group holds them to N (container.Limits.CommandPids), so
// the agent's reserve cannot be consumed at all.
func (l Limits) cgroupPids() int64 {
	if l.Pids == 0 {
		return 0
	}
	return l.Pids + wire.ThreadReserve + 8
}
