package runner

import (
	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/sandbox/container"
)

// sandboxPath is the PATH inside a container: the usual directories, plus Go's install
// directory, since hosts put the toolchain there.
const sandboxPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/go/bin"

// containerEnv is a container's default environment, then extra ("K=V", later wins). None
// of it comes from paddock's own environment: nothing of the host leaks in.
func containerEnv(extra []string) []string {
	env := []string{
		"PATH=" + sandboxPath,
		"HOME=/tmp",
		"USER=sandbox",
		"LOGNAME=sandbox",
		"LANG=C.UTF-8",
		"TMPDIR=/tmp",
	}
	return append(env, extra...)
}

func (l Limits) container() container.Limits {
	return container.Limits{MemoryBytes: int64(l.Memory), CPUs: l.CPUs, Pids: l.Pids, TmpBytes: int64(l.Tmp)}
}

func (l Limits) cgroup() cgroups.Limits {
	return cgroups.Limits{MemoryBytes: int64(l.Memory), CPUs: l.CPUs, Pids: l.Pids}
}
