package runner

import (
	"strings"

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
	return mergeEnv(env, extra)
}

// mergeEnv is env with extra over it: a key extra sets is set once, to extra's last value
// (getenv reads the first of a name, so a later duplicate would not win).
func mergeEnv(env, extra []string) []string {
	out := make([]string, 0, len(env)+len(extra))
	at := map[string]int{}
	for _, kv := range append(append([]string{}, env...), extra...) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := at[k]; ok {
			out[i] = kv
			continue
		}
		at[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// cgroupLimits is the sandbox's cgroup as a whole (the process tier's, which holds the
// agent and its commands).
func cgroupLimits(l wire.Limits) cgroups.Limits {
	return cgroups.Limits{MemoryBytes: int64(l.Memory), CPUs: l.CPUs, Pids: l.SandboxPids()}
}
