package container

import (
	"fmt"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/paddockhq/paddock/internal/wire"
)

// The gated root (at wire.GatedRootPath): a second view of the sandbox's filesystem, in which an exec whose
// programs a capability token limits runs (its trampoline chroots there before it takes
// the sandbox user's ids). Its system directories are the same read-only binds; its
// writable places are noexec: the workspace (the same directory, bound again), and a
// /tmp and a /dev/shm of its own. So nothing written to the sandbox can be executed by
// such an exec, nor mapped executable (the kernel refuses mmap with PROT_EXEC of a file
// on a noexec mount, which Landlock's execute right does not cover: a library a granted
// program loads by a path). It has no /proc and no /sys: through /proc/<pid>/root an
// exec could reach the other view, where the workspace is not noexec.
const gatedTmpSize = 64 << 20

// gatedDirs are the mount points and directories the gated root's tree holds in the rootfs.
var gatedDirs = []string{"dev", "dev/shm", "tmp", "usr", "etc", "workspace", "shared", "home", "root", "run", "var/tmp"}

// gatedDevices are the host's device nodes bound into the gated root's /dev: the ones a
// command needs, all allowed by the container's device rules.
var gatedDevices = []string{"null", "zero", "full", "random", "urandom"}

// makeGatedRoot makes the gated root's tree in the rootfs at root.
func makeGatedRoot(root string, b bundleSpec) error {
	g := filepath.Join(root, wire.GatedRootPath)
	for _, d := range gatedDirs {
		if err := os.MkdirAll(filepath.Join(g, d), 0o755); err != nil {
			return err
		}
	}
	for _, d := range gatedDevices {
		if err := touch(filepath.Join(g, "dev", d)); err != nil {
			return err
		}
	}
	for _, d := range hostSystemDirs[1:] {
		if err := mirrorSystemDir(g, d); err != nil {
			return err
		}
	}
	return makeEtc(filepath.Join(g, "etc"), b)
}

// gatedMounts are the gated root's mounts, after the sandbox's own.
func gatedMounts(b bundleSpec) []specs.Mount {
	at := func(p string) string { return wire.GatedRootPath + p }
	ms := []specs.Mount{
		{Destination: at("/dev"), Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "noexec", "mode=755", "size=64k"}},
	}
	for _, d := range gatedDevices {
		ms = append(ms, specs.Mount{Destination: at("/dev/" + d), Type: "bind", Source: "/dev/" + d, Options: []string{"bind", "nosuid", "noexec"}})
	}
	ms = append(ms,
		specs.Mount{Destination: at("/dev/shm"), Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		specs.Mount{Destination: at("/tmp"), Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", fmt.Sprintf("size=%d", gatedTmp(b.limits))}},
		specs.Mount{Destination: at(wire.WorkspacePath), Type: "bind", Source: b.workspace, Options: []string{"bind", "rw", "nosuid", "nodev", "noexec"}},
	)
	if b.shared != "" {
		ms = append(ms, specs.Mount{Destination: at(wire.SharedPath), Type: "bind", Source: b.shared, Options: []string{"bind", "rw", "nosuid", "nodev", "noexec"}})
	}
	for _, d := range hostSystemDirs {
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
			ms = append(ms, roBind(d, at(d)))
		}
	}
	for _, e := range hostEtc {
		p := filepath.Join("/etc", e)
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			ms = append(ms, roBind(p, at(p)))
		}
	}
	return ms
}

// gatedTmp sizes the gated root's /tmp: gatedTmpSize, or a quarter of the sandbox's
// memory when that is less (its pages are memory).
func gatedTmp(l wire.Limits) int64 {
	if l.Memory > 0 {
		return min(gatedTmpSize, int64(l.Memory)/4)
	}
	return gatedTmpSize
}
