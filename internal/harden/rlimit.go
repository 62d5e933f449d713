//go:build linux

package harden

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// setRlimits sets RLIMIT_CORE to 0 and the configured limits, soft and hard, so the sandbox
// cannot raise them back. Rlimits belong to the process, not a thread, and survive execve.
func setRlimits(l Rlimits) []outcome {
	limits := []struct {
		step     string
		resource int
		value    uint64
	}{
		{"rlimit_core", unix.RLIMIT_CORE, 0},
		{"rlimit_nofile", unix.RLIMIT_NOFILE, l.NoFile},
		{"rlimit_fsize", unix.RLIMIT_FSIZE, l.FileSize},
	}
	var outs []outcome
	for _, lim := range limits {
		if lim.value == 0 && lim.resource != unix.RLIMIT_CORE {
			continue
		}
		outs = append(outs, setRlimit(lim.step, lim.resource, lim.value))
	}
	return outs
}

func setRlimit(step string, resource int, value uint64) outcome {
	// syscall.Setrlimit, not unix.Setrlimit: for RLIMIT_NOFILE it also stops the Go runtime
	// from restoring its startup soft limit in the children os/exec starts.
	if err := syscall.Setrlimit(resource, &syscall.Rlimit{Cur: value, Max: value}); err != nil {
		return stepFailed(step, fmt.Errorf("setrlimit to %d: %w", value, err))
	}
	var got unix.Rlimit
	if err := unix.Getrlimit(resource, &got); err != nil {
		return stepFailed(step, fmt.Errorf("getrlimit: %w", err))
	}
	if got.Cur != value || got.Max != value {
		return stepFailed(step, fmt.Errorf("set to %d but reads back soft=%d hard=%d", value, got.Cur, got.Max))
	}
	return stepOK(step, fmt.Sprintf("soft=hard=%d", value))
}
