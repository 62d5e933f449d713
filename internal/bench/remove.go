package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/cgroups"
)

// Removal is a way to remove a running container.
type Removal int

const (
	// ForceDelete is `runc delete --force`, how Sandbox.Destroy began before it used a pidfd.
	ForceDelete Removal = iota
	// KillThenDelete kills the container's cgroup (cgroups.Group.Kill) and then deletes the
	// stopped container with a plain `runc delete`.
	KillThenDelete
)

// RuncRemove starts paddock's bundle running `sleep` detached and times its removal. The
// bundle writing and the start are not timed.
func (e *Env) RuncRemove(ctx context.Context, how Removal) (d time.Duration, err error) {
	id := newID("bench-")
	dir := filepath.Join(e.Dir, "bundles", id)
	cgroup := "/paddock/" + id
	defer func() {
		err = errors.Join(err, e.runcDelete(ctx, id), os.RemoveAll(dir))
		if g, lerr := cgroups.Load(cgroup); lerr == nil {
			err = errors.Join(err, g.Kill(ctx), g.Delete())
		}
	}()
	if err := e.writeBundle(id, dir, []string{"/bin/sleep", "3600"}); err != nil {
		return 0, err
	}
	// The container inherits runc's stdio and keeps it open: no pipes, or Wait would wait
	// for the container.
	log := filepath.Join(dir, "runc.log")
	if err := command(ctx, e.Runc, "--root", e.runcRoot, "--log", log, "run", "--detach", "--bundle", dir, id).Run(); err != nil {
		return 0, fmt.Errorf("runc run --detach: %w: %s", err, tail(readFile(log)))
	}
	// Kill only once runc's init has become sleep, as Destroy finds a sandbox: a process
	// caught in execve stalls the v1 freezer that cgroups.Group.Kill uses (see the notes).
	if err := waitExec(ctx, cgroup, "sleep"); err != nil {
		return 0, err
	}
	start := time.Now()
	switch how {
	case ForceDelete:
		err = e.runcDelete(ctx, id)
	case KillThenDelete:
		var g *cgroups.Group
		if g, err = cgroups.Load(cgroup); err == nil {
			err = g.Kill(ctx)
		}
		if err == nil {
			if out, derr := command(ctx, e.Runc, "--root", e.runcRoot, "delete", id).CombinedOutput(); derr != nil {
				err = fmt.Errorf("runc delete %s: %w: %s", id, derr, bytes.TrimSpace(out))
			}
		}
	}
	return time.Since(start), err
}

// tmpfsDir is a directory on tmpfs to write bundles into for comparison, or "" if the
// host has none at /dev/shm.
func tmpfsDir() string {
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		return ""
	}
	return "/dev/shm"
}

// WriteBundleIn times container.WriteBundle of paddock's bundle into a fresh directory
// under parent, and removes it.
func (e *Env) WriteBundleIn(parent string) (d time.Duration, err error) {
	id := newID("bench-")
	dir := filepath.Join(parent, "pdkb-"+id)
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	start := time.Now()
	err = e.writeBundle(id, dir, []string{"/bin/true"})
	return time.Since(start), err
}

// fsName says whether path is on tmpfs.
func fsName(path string) string {
	var st unix.Statfs_t
	for ; path != "/"; path = filepath.Dir(path) {
		if err := unix.Statfs(path, &st); err == nil {
			break
		}
	}
	if st.Type == unix.TMPFS_MAGIC {
		return "on tmpfs"
	}
	return "not on tmpfs"
}

// waitExec waits until the cgroup's only process is comm.
func waitExec(ctx context.Context, cgroup, comm string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		if g, err := cgroups.Load(cgroup); err == nil {
			pids, err := g.Pids()
			if err == nil && len(pids) == 1 && strings.TrimSpace(readFile(fmt.Sprintf("/proc/%d/comm", pids[0]))) == comm {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cgroup %s: no %s started: %w", cgroup, comm, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}
