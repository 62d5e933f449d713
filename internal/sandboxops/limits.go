package sandboxops

import (
	"fmt"
	"syscall"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/wire"
)

// Which limit ended or hurt a command (api.ExecResult.Limit). The timeout and the file
// size limit are the command's own: the agent killed it, or SIGXFSZ ended it. Memory and
// pids are the sandbox's cgroup's, whose counts of OOM kills and refused forks are read
// before and after the command: a count that grew means the limit was met while it ran,
// by it or by something beside it (the counts are the whole sandbox's). The disk is full
// or not: a command after which it is full met it (or found it so).

// limitCounts are a sandbox's counts at one moment; a count that could not be read (a
// kernel without it) is not known, and decides nothing.
type limitCounts struct {
	oom, forks           uint64
	oomKnown, forksKnown bool
	// diskFull: the sandbox's disk is (nearly) full (runner.Sandbox.DiskFull).
	diskFull bool
	// sharedFull: the user's shared disk is (runner.Sandbox.SharedFull).
	sharedFull bool
}

func countLimits(sb *runner.Sandbox) limitCounts {
	var c limitCounts
	var err error
	c.oom, err = sb.OOMKills()
	c.oomKnown = err == nil
	c.forks, err = sb.ForksRefused()
	c.forksKnown = err == nil
	c.diskFull = sb.DiskFull()
	c.sharedFull = sb.SharedFull()
	return c
}

// commandEnd is how a command ended, as far as its limits go.
type commandEnd struct {
	signal   int
	timedOut bool
	// timeout names the time limit that applied and its value: "the exec's timeout
	// (1m0s)", "the policy's timeout (2s)".
	timeout string
}

// limitHit names the limit a command met, from how it ended and the sandbox's counts
// before and after it, with a message that says which and its value; "" when none.
func limitHit(end commandEnd, before, after limitCounts, l wire.Limits) (limit, msg string) {
	switch {
	case end.timedOut:
		return api.LimitTimeout, end.timeout + " was hit: the command was killed"
	case end.signal == int(syscall.SIGXFSZ):
		return api.LimitFileSize, "the sandbox's file size limit" + value(l.FileSize > 0, l.FileSize.String()) + " was hit: the command was ended by SIGXFSZ"
	case before.oomKnown && after.oomKnown && after.oom > before.oom:
		n := after.oom - before.oom
		return api.LimitMemory, "the sandbox's memory limit" + value(l.Memory > 0, l.Memory.String()) + " was hit: " +
			count(n, "a process was", "processes were") + " killed"
	case before.forksKnown && after.forksKnown && after.forks > before.forks:
		n := after.forks - before.forks
		return api.LimitPids, "the sandbox's process limit" + value(l.Pids > 0, fmt.Sprint(l.Pids)) + " was hit: " +
			count(n, "a fork was", "forks were") + " refused"
	case after.sharedFull:
		return api.LimitDisk, "the user's shared disk was reached: " + wire.SharedPath + " (HOME and the npm, Go and cargo caches) is full, and writes there fail with ENOSPC; remove caches under " + wire.SharedPath + "/cache, or ask for a larger shared_disk"
	case after.diskFull:
		return api.LimitDisk, "the sandbox's disk limit" + value(l.Disk > 0, l.Disk.String()) + " was reached: its workspace and /tmp are full, and writes fail with ENOSPC"
	}
	return "", ""
}

// value is " (v)" when known.
func value(known bool, v string) string {
	if !known {
		return ""
	}
	return " (" + v + ")"
}

func count(n uint64, one, many string) string {
	if n == 1 {
		return one
	}
	return fmt.Sprintf("%d %s", n, many)
}
