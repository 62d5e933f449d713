package runner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/paddockhq/paddock/internal/wire"
)

// Each user's shared disk. A user's persistent container sandboxes share one directory,
// <workspace_root>/<user>/shared, bound at wire.SharedPath: HOME and the npm, Go and cargo
// caches live there, so a second sandbox of the user's resolves from a warm cache, and
// they survive a restart. It is an ext4 image of its own (disks/shared.img, like a
// sandbox's disk): what the caches may take is bounded (Config.SharedDisk), a write past
// it fails with ENOSPC, and a command that meets it says so. It is never bound into
// another user's sandbox: the path is made from the user's name alone.

// defaultSharedDisk is a user's shared disk when Config.SharedDisk is not set.
const defaultSharedDisk = 2 << 30

// sharedEnv puts HOME and the tools' caches on the shared disk.
var sharedEnv = []string{
	"HOME=" + wire.SharedPath + "/home",
	"XDG_CACHE_HOME=" + wire.SharedPath + "/cache",
	"npm_config_cache=" + wire.SharedPath + "/cache/npm",
	"GOMODCACHE=" + wire.SharedPath + "/cache/go/mod",
	"GOCACHE=" + wire.SharedPath + "/cache/go/build",
	"CARGO_HOME=" + wire.SharedPath + "/cache/cargo",
	// The coding agent's conversation is the sandbox's own, not the user's: it stays
	// where it was under HOME=/tmp.
	agentStateEnv + "=/tmp/.paddock-agent",
}

// agentStateEnv is where the coding agent keeps its state (coder.EnvState).
const agentStateEnv = "PADDOCK_AGENT_STATE"

// sharedDirs are made on the shared disk, the sandbox user's.
var sharedDirs = []string{"home", "cache"}

// openShared mounts user's shared disk at its directory unless it is, and returns it; nil
// when shared disks are off. Its files are the sandbox user's (uid:gid).
func (r *Runner) openShared(user string, uid, gid uint32) (*disk, error) {
	size := r.cfg.SharedDisk
	if size < 0 {
		return nil, nil
	}
	if size == 0 {
		size = defaultSharedDisk
	}
	userDir := filepath.Join(r.cfg.WorkspaceRoot, user)
	d := &disk{image: filepath.Join(userDir, "disks", "shared.img"), mount: filepath.Join(userDir, "shared"), size: size}
	// Two sandboxes of the user's starting at once mount it once.
	unlock, err := lockFile(filepath.Join(userDir, "disks", ".shared.lock"))
	if err != nil {
		return nil, fmt.Errorf("shared disk: %w", err)
	}
	defer unlock()
	if err := r.makeImage(d.image, size, 0, true); err != nil {
		return nil, fmt.Errorf("shared disk of %s: %w", user, err)
	}
	if !isMountPoint(d.mount) {
		if err := mountImage(d.image, d.mount); err != nil {
			return nil, fmt.Errorf("shared disk of %s: %w", user, err)
		}
	}
	if err := os.Chmod(d.mount, 0o755); err != nil {
		return nil, fmt.Errorf("shared disk: %w", err)
	}
	for _, sub := range sharedDirs {
		p := filepath.Join(d.mount, sub)
		if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("shared disk: %w", err)
		}
		if err := os.Lchown(p, int(uid), int(gid)); err != nil {
			return nil, fmt.Errorf("shared disk: %w", err)
		}
	}
	return d, nil
}

// SharedFull reports whether the user's shared disk, as this sandbox has it, is (nearly)
// full. False without one.
func (s *Sandbox) SharedFull() bool { return s.shared.full() }

// RemoveShared unmounts and deletes user's shared disk: their caches and HOME. Their
// sandboxes must be stopped; a running one would keep the old disk until it stops.
func (r *Runner) RemoveShared(user string) error {
	if !validUser(user) {
		return invalidUser(user)
	}
	dir := filepath.Join(r.cfg.WorkspaceRoot, user)
	if err := unmount(filepath.Join(dir, "shared")); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(dir, "disks", "shared.img")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("shared disk: %w", err)
	}
	return nil
}

// mountedShared is user's shared disk if it is mounted (an adopted sandbox's), else nil.
func (r *Runner) mountedShared(user string) *disk {
	userDir := filepath.Join(r.cfg.WorkspaceRoot, user)
	d := &disk{image: filepath.Join(userDir, "disks", "shared.img"), mount: filepath.Join(userDir, "shared")}
	fi, err := os.Stat(d.image)
	if err != nil || !isMountPoint(d.mount) {
		return nil
	}
	d.size = wire.Size(fi.Size())
	return d
}
