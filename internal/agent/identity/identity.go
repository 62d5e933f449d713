// Package identity lets the agent act as the sandbox user while it runs as another.
//
// In the container tier the agent runs as the container's root with a few capabilities
// and every command as the unprivileged sandbox user: across users the kernel stops a
// command from signalling, ptracing, renicing or prlimiting the agent. The agent's own file
// operations must then not be more powerful than the sandbox user (the file API is not a
// way around file permissions) and must leave files the sandbox user owns. Linux keeps a
// per-thread credentials: Do locks the calling goroutine to its OS thread, switches that
// thread's effective user, group and supplementary groups to the user's, runs f, and
// switches back. Leaving root also drops the thread's effective capabilities
// (CAP_DAC_OVERRIDE and the like), so f gets the user's permissions and no more.
package identity

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// User is a numeric user and group; the zero value means "the agent itself".
type User struct{ UID, GID uint32 }

// Do runs f with u's filesystem identity on a locked OS thread. With the zero User it just
// runs f. If the thread's identity cannot be restored afterwards, the thread is left
// locked, so the runtime ends it with the goroutine rather than reuse it.
func Do(u User, f func() error) error {
	if u == (User{}) {
		return f()
	}
	runtime.LockOSThread()
	orig, err := current()
	if err != nil {
		return fmt.Errorf("act as uid %d: %v: %w", u.UID, err, errdefs.ErrUnavailable)
	}
	restore := func() {
		if set(orig) == nil {
			runtime.UnlockOSThread()
		}
	}
	if err := set(creds{euid: u.UID, egid: u.GID, groups: []uint32{u.GID}}); err != nil {
		restore()
		return fmt.Errorf("act as uid %d: %v: %w", u.UID, err, errdefs.ErrUnavailable)
	}
	defer restore()
	return f()
}

// creds is a thread's effective user and group and its supplementary groups.
type creds struct {
	euid, egid uint32
	groups     []uint32
}

// keep leaves an id unchanged in setresuid and setresgid.
const keep = ^uintptr(0)

// current reads this thread's credentials.
func current() (creds, error) {
	var r, e, s uint32
	if _, _, errno := unix.RawSyscall(unix.SYS_GETRESUID, uintptr(unsafe.Pointer(&r)), uintptr(unsafe.Pointer(&e)), uintptr(unsafe.Pointer(&s))); errno != 0 {
		return creds{}, fmt.Errorf("getresuid: %w", errno)
	}
	c := creds{euid: e}
	if _, _, errno := unix.RawSyscall(unix.SYS_GETRESGID, uintptr(unsafe.Pointer(&r)), uintptr(unsafe.Pointer(&e)), uintptr(unsafe.Pointer(&s))); errno != 0 {
		return creds{}, fmt.Errorf("getresgid: %w", errno)
	}
	c.egid = e
	n, _, errno := unix.RawSyscall(unix.SYS_GETGROUPS, 0, 0, 0)
	if errno != 0 {
		return creds{}, fmt.Errorf("getgroups: %w", errno)
	}
	c.groups = make([]uint32, n)
	if n > 0 {
		if _, _, errno := unix.RawSyscall(unix.SYS_GETGROUPS, n, uintptr(unsafe.Pointer(&c.groups[0])), 0); errno != 0 {
			return creds{}, fmt.Errorf("getgroups: %w", errno)
		}
	}
	return c, nil
}

// set changes this thread's effective ids and groups with raw system calls (the libc and
// syscall package versions change every thread), leaving the real and saved ids alone: the
// saved root id is what lets the thread become root again, and the real one keeps the
// other users' processes from signalling or prlimiting it meanwhile. Becoming root again
// comes first (it restores the effective capabilities that setgroups and setresgid need);
// leaving root comes last. setfsuid would do for Linux, but gVisor does not implement it.
func set(c creds) error {
	if c.euid == 0 {
		if err := setEUID(c.euid); err != nil {
			return err
		}
	}
	var ptr unsafe.Pointer
	if len(c.groups) > 0 {
		ptr = unsafe.Pointer(&c.groups[0])
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(c.groups)), uintptr(ptr), 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, keep, uintptr(c.egid), keep); e != 0 {
		return fmt.Errorf("setresgid: %w", e)
	}
	if c.euid != 0 {
		return setEUID(c.euid)
	}
	return nil
}

func setEUID(uid uint32) error {
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(uid), keep); e != 0 {
		return fmt.Errorf("setresuid: %w", e)
	}
	return nil
}
