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

// cgroupPids is the sandbox's pids limit: what the user asked for, plus the agent's own
// threads. The commands are held to N, the command itself included, by a group of their
// own under runc and in a microVM's guest (CommandPids), and by RLIMIT_NPROC under runsc;
// in the process tier they share this limit with the agent.
func (l Limits) cgroupPids() int64 {
	if l.Pids == 0 {
		return 0
	}
	return l.Pids + wire.ThreadReserve + 8
}
