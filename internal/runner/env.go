package runner

import (
	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/sandbox"
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

// cgroupLimits is the sandbox's cgroup as a whole (the process tier's, which holds the
// agent and its commands).
func cgroupLimits(l wire.Limits) cgroups.Limits {
	return cgroups.Limits{MemoryBytes: int64(l.Memory), CPUs: l.CPUs, Pids: l.SandboxPids()}
}
