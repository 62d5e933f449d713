package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/sandbox/container"
	"github.com/paddockhq/paddock/internal/wire"
)

// provision makes the user's workspace tree on first use and picks the sandbox's workspace:
// the one asked for, or a fresh one under the user's tmp that Destroy removes.
func (r *Runner) provision(spec Spec, sb *Sandbox) error {
	owner := spec.User
	userDir, err := r.ownerDir(spec)
	if err != nil {
		return err
	}
	if spec.Pool {
		owner = poolOwner
	}
	uid, gid := r.cfg.SandboxUID, r.cfg.SandboxGID
	if spec.Persistent {
		if spec.Workspace != "" {
			return fmt.Errorf("a persistent sandbox's workspace is paddock's own; --workspace cannot be given: %w", errdefs.ErrInvalidArgument)
		}
		dir := filepath.Join(userDir, "sandboxes", sb.ID)
		if r.withDisk(sb) && !r.legacyWorkspace(owner, sb.ID) {
			if spec.Pool {
				dir = filepath.Join(userDir, "mounts", sb.ID)
			}
			if spec.DiskFrom != "" && !spec.Pool && sb.Tier == wire.TierContainer {
				if !ValidID(spec.DiskFrom) {
					return invalidField("disk_from", "%q is not a sandbox ID", spec.DiskFrom)
				}
				if sb.copied, sb.proven, err = r.forkDisk(owner, spec.DiskFrom, sb.ID, historyOf(false), spec.ProveCopy); err != nil {
					return err
				}
			}
			if sb.disk, err = r.openDisk(owner, sb.ID, dir, sb.Limits.Disk, false, sb.Tier, uid, gid); err != nil {
				return err
			}
			sb.Workspace = sb.disk.workspace()
		} else {
			sb.Workspace = dir
			if err := r.makeWorkspace(sb.Workspace, true); err != nil {
				return err
			}
		}
		return r.makeHistory(userDir, sb)
	}
	dir := filepath.Join(userDir, "tmp", sb.ID)
	if spec.Workspace != "" {
		ws, err := r.checkWorkspace(spec.Workspace)
		if err != nil {
			return err
		}
		if err := r.checkEnterable(spec.Workspace, ws); err != nil {
			return err
		}
		sb.Workspace = ws
		// The user's directory is theirs, not counted; the container's /tmp is.
		if r.withDisk(sb) && sb.Tier == wire.TierContainer {
			sb.disk = r.openDiskAsync(spec.User, sb.ID, dir, sb.Limits.Disk, sb.Tier, uid, gid)
		}
		return nil
	}
	if r.withDisk(sb) {
		// A container's runtime waits for the disk only once its bundle is written
		// (container.Config.Ready); the other tiers wait for it at once.
		if sb.Tier == wire.TierContainer {
			sb.disk = r.openDiskAsync(spec.User, sb.ID, dir, sb.Limits.Disk, sb.Tier, uid, gid)
		} else if sb.disk, err = r.openDisk(spec.User, sb.ID, dir, sb.Limits.Disk, true, sb.Tier, uid, gid); err != nil {
			return err
		}
		sb.Workspace = sb.disk.workspace()
		return nil
	}
	sb.Workspace = dir
	sb.removeWorkspace = true
	return r.makeWorkspace(sb.Workspace, false)
}

// ownerDir is the directory of the tree spec's sandbox lives in: its user's, or the pool's.
func (r *Runner) ownerDir(spec Spec) (string, error) {
	if spec.Pool {
		return r.poolDir()
	}
	return r.ProvisionUser(spec.User)
}

// withDisk says whether sb gets a disk image (disk.go): it has a disk limit, and this
// process may mount one (root). Without root the limit is not enforced, and said so.
func (r *Runner) withDisk(sb *Sandbox) bool {
	if sb.Limits.Disk <= 0 {
		return false
	}
	if os.Geteuid() != 0 {
		r.log.Warn("DEGRADED: the disk limit is not enforced: mounting a sandbox's disk image needs root", "sandbox", sb.ID, "disk", sb.Limits.Disk)
		return false
	}
	return true
}

// legacyWorkspace reports whether a persistent sandbox's workspace was made before disk
// images: a directory with files in it and no image. It is used as it is, without a disk
// limit.
func (r *Runner) legacyWorkspace(user, id string) bool {
	if _, err := os.Stat(r.diskImage(user, id)); err == nil {
		return false
	}
	dir := filepath.Join(r.cfg.WorkspaceRoot, user, "sandboxes", id)
	names, err := os.ReadDir(dir)
	if err == nil && len(names) > 0 {
		r.log.Warn("the sandbox's workspace predates disk images: no disk limit applies to it", "sandbox", id)
		return true
	}
	return false
}

// persistentWorkspace is where a persistent sandbox's workspace is on the host, and its
// disk (not mounted by this call) when it has one.
func (r *Runner) persistentWorkspace(user, id string) (string, *disk) {
	dir := filepath.Join(r.cfg.WorkspaceRoot, user, "sandboxes", id)
	img := r.diskImage(user, id)
	fi, err := os.Stat(img)
	if err != nil {
		return dir, nil
	}
	d := &disk{image: img, mount: dir, size: wire.Size(fi.Size())}
	ws := d.workspace()
	return ws, d
}

// makeHistory makes the directory of the sandbox's workspace history,
// <workspace_root>/<user>/history/<id>: beside the workspaces, never inside one, root's and
// 0700 (as is history/ itself), so that only the agent, the container's root, reaches it
// (with a user namespace the container package gives it to the agent's host id at start).
// It is kept (and reused) as the workspace is, until RemoveWorkspace. Only persistent
// sandboxes (the control plane's) have history: a one-shot sandbox's workspace is gone
// when it ends, or is a directory of the user's (--workspace) that a first checkpoint
// would copy whole (in the background, but on the same disk and CPUs as the command), and
// either way there is nothing to undo afterwards. Only the container tier keeps history:
// the process tier's agent runs as the sandbox user, who could then rewrite it, and the
// microvm tier has no way to the host's disk but the workspace yet.
func (r *Runner) makeHistory(userDir string, sb *Sandbox) error {
	if sb.Tier != wire.TierContainer {
		return nil
	}
	dir := filepath.Join(userDir, "history", sb.ID)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("history: %w", err)
	}
	// Made by an older paddock or by hand: whatever it was, it is private now, and root's
	// unless an agent's (a range's first id, which the container package gave it at an
	// earlier start, and asks for again so as not to give the whole store to another).
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	var st syscall.Stat_t
	if os.Geteuid() == 0 && (syscall.Lstat(dir, &st) != nil || !container.IsAgentHostID(st.Uid) || st.Gid != st.Uid) {
		if err := os.Lchown(dir, 0, 0); err != nil {
			return fmt.Errorf("history: %w", err)
		}
	}
	sb.History = dir
	return nil
}

// makeWorkspace makes a sandbox's own workspace directory, owned by the sandbox user. An
// existing one is reused only when reuse is set (a persistent sandbox started again).
func (r *Runner) makeWorkspace(dir string, reuse bool) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !(reuse && errors.Is(err, os.ErrExist)) {
		return fmt.Errorf("workspace: %w", err)
	}
	if err := os.Chown(dir, int(r.cfg.SandboxUID), int(r.cfg.SandboxGID)); err != nil && os.Geteuid() == 0 {
		return fmt.Errorf("workspace: %w", err)
	}
	return nil
}

// RemoveWorkspace deletes a persistent sandbox's workspace and its history.
func (r *Runner) RemoveWorkspace(user, id string) error {
	if !validUser(user) || !ValidID(id) {
		return fmt.Errorf("workspace of %q/%q: %w", user, id, errdefs.ErrInvalidArgument)
	}
	if r.cfg.OnCluster() {
		// The workspace and its history are the sandbox's volume, which goes with it.
		if err := r.removeFromCluster(context.Background(), id); err != nil {
			return err
		}
	}
	dir := filepath.Join(r.cfg.WorkspaceRoot, user)
	ws := filepath.Join(dir, "sandboxes", id)
	// The image first: what is removed below must be the host's directory, not the
	// image's files one by one.
	if err := unmount(ws); err != nil {
		return err
	}
	img := r.diskImage(user, id)
	if err := os.Remove(img); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("disk: %w", err)
	}
	return errors.Join(os.RemoveAll(ws), os.RemoveAll(filepath.Join(dir, "history", id)), os.RemoveAll(filepath.Join(dir, "agent", id)))
}

// AgentStateDir is where the host keeps a sandbox's coding-agent conversation, outside
// the sandbox (so that it outlives a restart, whose /tmp is new) and outside its
// workspace (so that undo does not rewrite it). RemoveWorkspace removes it.
func (r *Runner) AgentStateDir(user, id string) (string, error) {
	if !validUser(user) || !ValidID(id) {
		return "", fmt.Errorf("agent state of %q/%q: %w", user, id, errdefs.ErrInvalidArgument)
	}
	return filepath.Join(r.cfg.WorkspaceRoot, user, "agent", id), nil
}

// ProvisionUser creates <workspace_root>/<user>/{shared,tmp,sandboxes,history,vault,disks}
// if missing and returns the user's directory. disks (0700) holds the sandboxes' disk
// images (disk.go). vault is private to the host (0700): it is
// never mounted into a sandbox. history (0700) holds each sandbox's workspace history, of
// which only a sandbox's own is mounted, where its commands cannot reach it.
func (r *Runner) ProvisionUser(user string) (string, error) {
	if !validUser(user) {
		return "", invalidUser(user)
	}
	dir := filepath.Join(r.cfg.WorkspaceRoot, user)
	// The user's directory first, traversable: made by the first MkdirAll below, it would get
	// that subdirectory's mode, and when vault (0700) came first in the map's random order
	// the process tier's agent (the sandbox user) could not reach its workspace in tmp.
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", fmt.Errorf("provision workspace for %s: %w", user, err)
	}
	for sub, mode := range map[string]os.FileMode{"shared": 0o755, "tmp": 0o711, "sandboxes": 0o711, "history": 0o700, "vault": 0o700, "disks": 0o700} {
		if err := os.MkdirAll(filepath.Join(dir, sub), mode); err != nil {
			return "", fmt.Errorf("provision workspace for %s: %w", user, err)
		}
	}
	return dir, nil
}

// checkWorkspace resolves a workspace asked for on the command line and refuses ones that
// would show a sandbox more than its own files: the root, system directories, or any
// directory holding paddock's own state (other sandboxes' workspaces among it).
func (r *Runner) checkWorkspace(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		return "", fmt.Errorf("--workspace %s: %w", dir, errdefs.ErrNotFound)
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("--workspace %s is not a directory: %w", dir, errdefs.ErrInvalidArgument)
	}
	for _, sys := range []string{"/", "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/proc", "/sys", "/dev", "/boot", "/var", "/run", "/root", "/home", "/tmp", "/var/tmp"} {
		if abs == sys {
			return "", fmt.Errorf("--workspace %s is a system directory; give a project directory: %w", dir, errdefs.ErrInvalidArgument)
		}
	}
	for _, own := range []string{r.cfg.DataDir, r.cfg.StateDir, r.cfg.WorkspaceRoot} {
		if within(own, abs) || within(abs, own) {
			return "", fmt.Errorf("--workspace %s overlaps paddock's own state in %s: %w", dir, own, errdefs.ErrInvalidArgument)
		}
	}
	return abs, nil
}

// checkEnterable refuses a workspace of the host's root that others may not enter (mktemp
// -d makes one, 0700): commands run as the configured sandbox user there (sandboxUser),
// and the sandbox shows root's files as its agent's, never as its user's (a file the
// command wrote would be stored as the host root's), so the command could not even start
// in it. Said at the start, with the way out.
func (r *Runner) checkEnterable(asked, dir string) error {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil || st.Uid != 0 || st.Mode&0o001 != 0 {
		return nil
	}
	return fmt.Errorf("--workspace %s is root's and mode %04o: the sandbox's user (uid %d) could not enter it. Commands run as a workspace's owner unless that is root: give it to the user they should run as (chown -R %d:%d %s, or any non-root user), or pass a directory a non-root user owns: %w",
		asked, st.Mode&0o7777, r.cfg.SandboxUID, r.cfg.SandboxUID, r.cfg.SandboxGID, asked, errdefs.ErrPermissionDenied)
}

// within reports whether p is dir or inside it.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
