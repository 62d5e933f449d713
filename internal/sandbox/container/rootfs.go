package container

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/paddockhq/paddock/internal/wire"
)

// maxCopiedEtcFile bounds what is copied of a host /etc file into a sandbox's /etc.
const maxCopiedEtcFile = 1 << 20

// makeRootfs lays out a sandbox's root: empty mount points for what runc binds over them,
// the host's symlinks for merged-/usr directories, and a curated /etc. The rootfs is
// mounted read-only in the sandbox; on the host it lives in the sandbox's bundle and goes
// with it.
func makeRootfs(root string, b bundleSpec) error {
	for _, d := range []string{"proc", "dev", "sys", "tmp", "usr", "etc", "workspace", "home", "root", "run", "var/tmp", wire.SharedPath[1:], wire.AgentDir[1:], wire.HistoryPath[1:]} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if err := touch(filepath.Join(root, wire.AgentPath)); err != nil {
		return err
	}
	if trampoline(b.agent) != "" {
		if err := touch(filepath.Join(root, wire.TrampolinePath)); err != nil {
			return err
		}
	}
	for _, d := range hostSystemDirs[1:] {
		if err := mirrorSystemDir(root, d); err != nil {
			return err
		}
	}
	if b.gated {
		if err := makeGatedRoot(root, b); err != nil {
			return fmt.Errorf("gated root: %w", err)
		}
	}
	return makeEtc(filepath.Join(root, "etc"), b)
}

// mirrorSystemDir recreates /bin, /lib, … in the rootfs: a symlink where the host has one
// (merged /usr), a mount point where it has a directory.
func mirrorSystemDir(root, d string) error {
	fi, err := os.Lstat(d)
	switch {
	case os.IsNotExist(err):
		return nil
	case err != nil:
		return err
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(d)
		if err != nil {
			return err
		}
		return os.Symlink(target, filepath.Join(root, d))
	default:
		return os.MkdirAll(filepath.Join(root, d), 0o755)
	}
}

// makeEtc writes the sandbox's own identity files and brings in the safe parts of the
// host's /etc: small files and symlinks are copied, directories become mount points for
// read-only binds (see mounts).
func makeEtc(etc string, b bundleSpec) error {
	own := map[string]string{
		"passwd": fmt.Sprintf("root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:%d:%d:sandbox:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", b.uid, b.gid),
		"group":  fmt.Sprintf("root:x:0:\ntty:x:5:\nsandbox:x:%d:\nnogroup:x:65534:\n", b.gid),
		"hosts":  fmt.Sprintf("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t%s\n", b.hostname),
		// The sandbox has no network: no resolver is reachable, so none is named.
		"resolv.conf":   "",
		"hostname":      b.hostname + "\n",
		"nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files\nnetworks: files\nprotocols: files\nservices: files\n",
	}
	for name, content := range own {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	for _, e := range hostEtc {
		if err := bringEtc(filepath.Join("/etc", e), filepath.Join(etc, e)); err != nil {
			return fmt.Errorf("etc/%s: %w", e, err)
		}
	}
	return nil
}

func bringEtc(src, dst string) error {
	fi, err := os.Lstat(src)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case fi.IsDir():
		return os.MkdirAll(dst, 0o755)
	case fi.Mode().IsRegular() && fi.Size() <= maxCopiedEtcFile && !secretLooking(src):
		return copyFile(src, dst)
	}
	return nil
}

// secretLooking is a last guard on the curated list: nothing that looks like a key or a
// password file is copied even if someone adds it to hostEtc.
func secretLooking(p string) bool {
	base := filepath.Base(p)
	for _, s := range []string{"shadow", "gshadow", "key", "secret", "token", "passwd-", "sudoers"} {
		if strings.Contains(base, s) {
			return true
		}
	}
	return false
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, io.LimitReader(in, maxCopiedEtcFile))
	return closeWith(out, err)
}

func touch(p string) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o755)
	if err != nil {
		return err
	}
	return f.Close()
}

func closeWith(f *os.File, err error) error {
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ImageRootfs lays out at root the root of a sandbox image whose /usr comes from
// elsewhere (a cluster node's, bound read-only; see package sandbox/kube): the mount points,
// the merged-/usr symlinks and the curated /etc, whose host directories are copied in
// (symlinks and small files) rather than bound. The agent's files are the image's to add.
func ImageRootfs(root string, uid, gid uint32) error {
	if err := makeRootfs(root, bundleSpec{uid: uid, gid: gid, hostname: "sandbox"}); err != nil {
		return err
	}
	for _, e := range hostEtc {
		src := filepath.Join("/etc", e)
		if fi, err := os.Lstat(src); err != nil || !fi.IsDir() {
			continue
		}
		err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return nil // unreadable: left out
			}
			rel, _ := filepath.Rel("/etc", p)
			if d.IsDir() {
				return os.MkdirAll(filepath.Join(root, "etc", rel), 0o755)
			}
			if err := bringEtc(p, filepath.Join(root, "etc", rel)); err != nil && !os.IsExist(err) {
				return err
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("etc/%s: %w", e, err)
		}
	}
	return nil
}
