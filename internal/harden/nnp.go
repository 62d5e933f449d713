//go:build linux

package harden

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// setNoNewPrivs sets no_new_privs on every thread. The bit is per thread, so a plain prctl
// would leave the Go runtime's other threads without it; go-landlock's all-threads prctl
// (libpsx with cgo, syscall.AllThreadsSyscall without) reaches every one of them.
func setNoNewPrivs() outcome {
	const step = "no_new_privs"
	if err := llsys.AllThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return stepFailed(step, fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS) on all threads: %w", err))
	}
	n, err := threadsWithNoNewPrivs()
	if err != nil {
		return stepFailed(step, err)
	}
	return stepOK(step, fmt.Sprintf("set on all %d threads", n))
}

// threadsWithNoNewPrivs checks the bit on every thread of the process, as the kernel shows it
// in /proc/self/task/*/status, and returns how many threads it checked.
func threadsWithNoNewPrivs() (int, error) {
	statuses, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil || len(statuses) == 0 {
		return 0, fmt.Errorf("cannot list threads in /proc/self/task: %v", err)
	}
	for _, path := range statuses {
		status, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread exited
		}
		if err != nil {
			return 0, fmt.Errorf("reading thread status: %w", err)
		}
		if !bytes.Contains(status, []byte("\nNoNewPrivs:\t1\n")) {
			return 0, fmt.Errorf("thread %s does not have no_new_privs", filepath.Base(filepath.Dir(path)))
		}
	}
	return len(statuses), nil
}
