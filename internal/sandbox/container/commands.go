package container

import (
	"fmt"
	"os"
	"slices"

	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/sandbox"
	"github.com/paddockhq/paddock/internal/wire"
)

// The agent's reserve: the sandbox's commands run in a child group of the sandbox's
// (cgroups.Commands) whose memory limit is the sandbox's less this, so that what they
// hold (their pages, and the /tmp files they wrote) cannot take the agent's last memory,
// and whose pids limit is the user's, below the sandbox's (which adds the agent's
// threads). The agent stays in the sandbox's group, and makes a group per command below
// the commands', which it kills when the command ends.
const (
	maxAgentReserve = 64 << 20
	minCommandMem   = 16 << 20
)

// agentReserve is the memory kept for the agent out of a sandbox's limit of mem.
func agentReserve(mem int64) int64 { return min(maxAgentReserve, mem/4) }

// commandLimits are the commands' group's limits within the sandbox's l.
func commandLimits(l wire.Limits) cgroups.Limits {
	c := cgroups.Limits{Pids: l.Pids}
	if mem := int64(l.Memory); mem > 0 {
		c.MemoryBytes = max(mem-agentReserve(mem), min(mem, minCommandMem))
	}
	return c
}

// delegateCommands prepares the cgroups of a runc sandbox's commands before it starts
// (cgroups.Delegate: on v1 the commands' group, on v2 the sandbox's group, which the agent
// splits) and opens the directories the agent inherits after its channel (as fds 4, 5,
// …): it returns them and what the envelope says of them. Under a user namespace they are
// given to the agent's host id, which may then make groups in them and move processes
// into those, and nothing else; the sandbox user's commands can do neither. Where that
// cannot be done, commands stay in the sandbox's group and the caller says why.
func (sb *Sandbox) delegateCommands(l wire.Limits) (files []*os.File, fds map[string]int, err error) {
	dirs, err := cgroups.Delegate(sb.cgroup, cgroups.Limits{MemoryBytes: int64(l.Memory), CPUs: l.CPUs, Pids: l.SandboxPids()}, commandLimits(l), int(sb.idBase))
	if err != nil {
		return nil, nil, err
	}
	fds = map[string]int{}
	names := make([]string, 0, len(dirs))
	for c := range dirs {
		names = append(names, c)
	}
	slices.Sort(names)
	for i, c := range names {
		f, err := os.Open(dirs[c])
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, nil, fmt.Errorf("open the commands' cgroup: %w", err)
		}
		files = append(files, f)
		fds[c] = sandbox.AgentListenFD + 1 + i
	}
	return files, fds, nil
}
