package coder

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// lockFile is the state directory's lock, held by the run that owns the conversation.
const lockFile = "lock"

// ErrBusy is what New returns while another run holds the sandbox's conversation.
var ErrBusy = fmt.Errorf("another turn of this sandbox's agent is under way; wait for it to end, or stop it: %w", errdefs.ErrFailedPrecondition)

// lockState takes dir's lock, without waiting. One run at a time owns the conversation:
// two turns at once would write it over each other, and a second run would take the
// first's open transaction for a killed turn's and roll it back. The kernel drops the
// lock when its process dies, so a killed turn never leaves it held.
func lockState(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking the conversation: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrBusy
		}
		return nil, fmt.Errorf("locking the conversation: %w", err)
	}
	return f, nil
}
