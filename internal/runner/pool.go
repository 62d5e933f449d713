package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
)

// Warm pool. A pooled sandbox (Spec.Pool) is a persistent container sandbox started ahead
// for no one: its workspace, disk image and history live under <workspace_root>/.pool (a
// name no user can have, see validUser) until Claim moves them, while the sandbox runs,
// into the tree of the user who takes it. Nothing a user owns exists before the claim; the
// sandbox's ID, id range and capability keys are its own from the start and stay.

// poolOwner is the directory under the workspace root that holds pooled sandboxes.
const poolOwner = ".pool"

// poolDir makes <workspace_root>/.pool with the subdirectories of a user's tree, and
// mounts/, where pooled sandboxes' disk images are mounted. As root, mounts/ is made a
// private mount of its own: an image mounted below it can then be moved out (MS_MOVE
// refuses a mount whose parent propagates mounts, as / does on most hosts). The rest stays
// on the workspace root's own mount, so that Claim renames files there.
func (r *Runner) poolDir() (string, error) {
	dir := filepath.Join(r.cfg.WorkspaceRoot, poolOwner)
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", fmt.Errorf("pool: %w", err)
	}
	for sub, mode := range map[string]os.FileMode{"sandboxes": 0o711, "history": 0o700, "disks": 0o700, "mounts": 0o700} {
		if err := os.MkdirAll(filepath.Join(dir, sub), mode); err != nil {
			return "", fmt.Errorf("pool: %w", err)
		}
	}
	mounts := filepath.Join(dir, "mounts")
	if os.Geteuid() != 0 || mountedAt(mounts) {
		return dir, nil
	}
	if err := unix.Mount(mounts, mounts, "", unix.MS_BIND, ""); err != nil {
		return "", fmt.Errorf("pool: bind %s: %w", mounts, err)
	}
	if err := unix.Mount("", mounts, "", unix.MS_PRIVATE, ""); err != nil {
		return "", fmt.Errorf("pool: make %s private: %w", mounts, err)
	}
	return dir, nil
}

// mountedAt reports whether something is mounted at dir, a bind of itself included.
func mountedAt(dir string) bool {
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(info), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// Claimable says whether a sandbox of user may come from the pool: the pool's sandboxes
// have the host's defaults, and a user whose own configuration changes the tier or the
// limits needs one made for them.
func (r *Runner) Claimable(user string) error {
	uc, err := r.cfg.LoadUser(user)
	if err != nil {
		return err
	}
	if uc.Tier != "" || uc.Limits != (wire.Limits{}) {
		return fmt.Errorf("user %s has a tier or limits of their own: %w", user, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// Claim gives pooled sandbox sb to user: its workspace (the disk image's mount, moved, or
// the directory, renamed) and its history move into the user's tree while it runs. The
// sandbox's mounts hold what they bound, not the host's paths, so it sees no change.
func (r *Runner) Claim(sb *Sandbox, user string) error {
	if err := r.Claimable(user); err != nil {
		return err
	}
	if cs, ok := sb.backend.(ClusterSandbox); ok {
		return claimOnCluster(cs)
	}
	userDir, err := r.ProvisionUser(user)
	if err != nil {
		return err
	}
	ws := filepath.Join(userDir, "sandboxes", sb.ID)
	if sb.disk != nil {
		if err := r.claimDisk(sb.disk, r.diskImage(user, sb.ID), ws); err != nil {
			return err
		}
		sb.Workspace = sb.disk.workspace()
	} else {
		if err := os.Rename(sb.Workspace, ws); err != nil {
			return fmt.Errorf("claim workspace: %w", err)
		}
		sb.Workspace = ws
	}
	if sb.History != "" {
		h := filepath.Join(userDir, "history", sb.ID)
		if err := os.Rename(sb.History, h); err != nil {
			return fmt.Errorf("claim history: %w", err)
		}
		sb.History = h
	}
	return unnice(sb)
}

// unnice gives a claimed sandbox's processes the host's usual priority back: the pool
// starts them niced (see fleet's pool), and what they start inherits it.
func unnice(sb *Sandbox) error {
	g, err := cgroups.Load(sb.Cgroup())
	if err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	pids, err := g.Pids()
	if err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	for _, pid := range pids {
		// Priority is a thread's: every thread of the process, which any may fork.
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			continue // it has just exited
		}
		for _, task := range tasks {
			tid, err := strconv.Atoi(task.Name())
			if err != nil {
				continue
			}
			if err := unix.Setpriority(unix.PRIO_PROCESS, tid, 0); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("claim: priority of process %d: %w", pid, err)
			}
		}
	}
	return nil
}

// claimDisk moves d's image to image and its mount to mount. The loop device holds the
// image by its inode, so the rename does not disturb it.
func (r *Runner) claimDisk(d *disk, image, mount string) error {
	if err := os.Mkdir(mount, 0o700); err != nil {
		return fmt.Errorf("claim workspace: %w", err)
	}
	if err := unix.Mount(d.mount, mount, "", unix.MS_MOVE, ""); err != nil {
		_ = os.Remove(mount)
		return fmt.Errorf("claim workspace: move %s: %w", d.mount, err)
	}
	_ = os.Remove(d.mount)
	d.mount = mount
	if err := os.Rename(d.image, image); err != nil {
		return fmt.Errorf("claim disk image: %w", err)
	}
	d.image = image
	return nil
}

// Discard destroys a pooled sandbox that no one claimed, with its workspace.
func (r *Runner) Discard(ctx context.Context, sb *Sandbox) error {
	return errors.Join(sb.Destroy(ctx), r.removePooled(sb.ID))
}

// removePooled removes what the pool holds of sandbox id: its mount, image, workspace and
// history.
func (r *Runner) removePooled(id string) error {
	dir := filepath.Join(r.cfg.WorkspaceRoot, poolOwner)
	ws := filepath.Join(dir, "sandboxes", id)
	mount := filepath.Join(dir, "mounts", id)
	if err := unmount(mount); err != nil {
		return err
	}
	img := filepath.Join(dir, "disks", id+".img")
	if err := os.Remove(img); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pool disk: %w", err)
	}
	if err := os.Remove(mount); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pool: %w", err)
	}
	return errors.Join(os.RemoveAll(ws), os.RemoveAll(filepath.Join(dir, "history", id)))
}

// ReapPool removes every pooled sandbox an earlier control plane left behind: pooled
// sandboxes are no one's, so none is adopted. templates are the fleet's pools (by
// template, "" for the default app's): on a cluster, paddock's pools of any other are
// deleted; on this host, with none, there is nothing to reap.
func (r *Runner) ReapPool(ctx context.Context, runtime string, templates []string) error {
	if r.cfg.OnCluster() {
		return r.reapOnCluster(ctx, templates)
	}
	if len(templates) == 0 {
		return nil
	}
	dir := filepath.Join(r.cfg.WorkspaceRoot, poolOwner)
	seen := map[string]bool{}
	for _, sub := range []string{"sandboxes", "history", "mounts"} {
		names, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("pool: %w", err)
		}
		for _, n := range names {
			seen[n.Name()] = true
		}
	}
	var errs []error
	for id := range seen {
		if !ValidID(id) {
			continue
		}
		errs = append(errs, r.Reap(ctx, Record{ID: id, Tier: wire.TierContainer, Runtime: runtime}), r.removePooled(id))
	}
	return errors.Join(errs...)
}
