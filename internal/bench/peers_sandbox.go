package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/container"
)

// runscPeer is gVisor's runsc run bare on paddock's own gVisor bundle, as RuncRun runs runc.
type runscPeer struct {
	*peer
	bin, root string
}

// newRunscPeer finds runsc where paddock's runner would (its configuration, then its own
// install); it is built by scripts/setup.sh, not Debian's.
func (e *Env) newRunscPeer() *runscPeer {
	p := &runscPeer{peer: &peer{name: "runsc"}, bin: e.Config.Runsc, root: filepath.Join(e.Dir, "runsc")}
	if p.bin == "" {
		p.bin = filepath.Join(runner.InstallPrefix, "bin", "runsc")
	}
	if _, err := os.Stat(p.bin); err != nil {
		p.missing = "runsc is not installed at " + p.bin + " (scripts/setup.sh builds it)"
	}
	return p
}

// Run times a foreground `runsc run` of the bundle paddock would run under gVisor, with
// `/bin/echo hi` in place of the agent and runsc's global flags as the runner's. The bundle
// is written before the clock starts.
func (p *runscPeer) Run(ctx context.Context, e *Env) (t Timing, err error) {
	id := newID("bench-")
	dir := filepath.Join(e.Dir, "bundles", id)
	rt := container.Runsc(p.bin, p.root, e.log)
	defer func() {
		out, derr := command(context.WithoutCancel(ctx), p.bin, append(append([]string{"--root", p.root}, rt.Flags...), "delete", "--force", id)...).CombinedOutput()
		if derr != nil && !strings.Contains(string(out), "not exist") && !strings.Contains(string(out), "not found") {
			err = errors.Join(err, fmt.Errorf("runsc delete %s: %s", id, strings.TrimSpace(string(out))))
		}
		err = errors.Join(err, os.RemoveAll(dir))
	}()
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return t, err
	}
	if err := rt.WriteBundle(e.bundleConfig(id, dir), dir, "/paddock/"+id, []string{"/bin/echo", "hi"}); err != nil {
		return t, err
	}
	args := append(append([]string{"--root", p.root}, rt.Flags...), "run", "--bundle", dir, id)
	return timeEcho(command(ctx, p.bin, args...))
}

// bwrapPeer is bubblewrap: the floor of a sandbox made of namespaces alone (no cgroups, no
// seccomp profile, no runtime state).
type bwrapPeer struct {
	*peer
	bin string
}

func newBwrapPeer() *bwrapPeer {
	p, bin := lookPeer("bwrap", "bwrap")
	return &bwrapPeer{peer: p, bin: bin}
}

// bwrapArgs is bubblewrap's command line for argv: every namespace new, the host's /usr
// read-only with /bin, /lib, … as the host has them (symlinks into /usr, or read-only
// binds), a fresh /proc, /dev and /tmp, the sandbox user.
func (e *Env) bwrapArgs(argv []string) []string {
	args := []string{"--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
		"--uid", strconv.Itoa(int(e.Config.SandboxUID)), "--gid", strconv.Itoa(int(e.Config.SandboxGID)),
		"--clearenv", "--setenv", "PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"--ro-bind", "/usr", "/usr"}
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(d); err == nil {
				args = append(args, "--symlink", target, d)
			}
		case fi.IsDir():
			args = append(args, "--ro-bind", d, d)
		}
	}
	args = append(args, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--")
	return append(args, argv...)
}

// Run times `bwrap … /bin/echo hi` from fork to first byte and exit.
func (p *bwrapPeer) Run(ctx context.Context, e *Env) (Timing, error) {
	return timeEcho(command(ctx, p.bin, e.bwrapArgs([]string{"/bin/echo", "hi"})...))
}

// podmanPeer is Debian's podman, rootful, with its storage, run state and temporary files
// under the environment's directory and its containers' cgroups under a parent of the
// bench's own, so that it leaves nothing behind.
type podmanPeer struct {
	*peer
	bin     string
	global  []string
	image   string
	cgroup  string // the containers' cgroup parent
	varLib  bool   // /var/lib/containers was not there before (podman's blob cache lands there)
	version string
}

// podmanImage is the name the bench's rootfs is imported as.
const podmanImage = "localhost/paddock-bench-rootfs"

// startPodman imports the rootfs of paddock's bundle as an image, once. The OCI runtime is
// the baseline's runc, so that the difference is podman's own (Debian's crun also refuses
// a hybrid cgroup hierarchy).
func (e *Env) startPodman(ctx context.Context) *podmanPeer {
	pr, bin := lookPeer("podman", "podman")
	p := &podmanPeer{peer: pr, bin: bin, image: podmanImage, cgroup: "/" + filepath.Base(e.Dir) + "-podman", version: "podman"}
	if pr.missing != "" {
		return p
	}
	_, err := os.Stat("/var/lib/containers")
	p.varLib = os.IsNotExist(err)
	dir, err := e.peerDir("podman")
	if err != nil {
		pr.fail(err)
		return p
	}
	p.global = []string{"--root", filepath.Join(dir, "storage"), "--runroot", filepath.Join(dir, "run"), "--tmpdir", filepath.Join(dir, "tmp"),
		"--cgroup-manager", "cgroupfs", "--events-backend", "none", "--runtime", e.Runc}
	err = func() error {
		id := newID("podman-")
		bdir := filepath.Join(e.Dir, "bundles", id)
		defer os.RemoveAll(bdir)
		if err := e.writeBundle(id, bdir, []string{"/bin/echo", "hi"}); err != nil {
			return err
		}
		tar := filepath.Join(dir, "rootfs.tar")
		if out, err := exec.CommandContext(ctx, "tar", "-C", filepath.Join(bdir, "rootfs"), "-cf", tar, ".").CombinedOutput(); err != nil {
			return fmt.Errorf("tar of the rootfs: %v: %s", err, out)
		}
		if out, err := exec.CommandContext(ctx, bin, append(p.global, "import", "--quiet", tar, p.image)...).CombinedOutput(); err != nil {
			return fmt.Errorf("podman import: %v: %s", err, strings.TrimSpace(string(out)))
		}
		out, _ := exec.CommandContext(ctx, bin, "--version").Output()
		p.version = strings.TrimSpace(string(out))
		return nil
	}()
	if err != nil {
		pr.fail(fmt.Errorf("could not import the rootfs: %w", err))
	}
	return p
}

// Run times `podman run --rm` of the image with `/bin/echo hi`, as the sandbox user, with
// no network but loopback and the host's /usr read-only as in paddock's bundle. The
// ulimits are given because podman's defaults (nofile 1048576, nproc 4194304) are above
// what a root without CAP_SYS_RESOURCE may set.
func (p *podmanPeer) Run(ctx context.Context, e *Env) (Timing, error) {
	return timeEcho(command(ctx, p.bin, p.runArgs(e, []string{"/bin/echo", "hi"}, "--rm")...))
}

// runArgs is podman's command line to run argv in a container of the image, as Run does,
// with flags (--rm, -d) before the image.
func (p *podmanPeer) runArgs(e *Env, argv []string, flags ...string) []string {
	args := append(append(append([]string{}, p.global...), "run"), flags...)
	args = append(args, "--network", "none",
		"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", "--cgroup-parent", p.cgroup,
		"--user", fmt.Sprintf("%d:%d", e.Config.SandboxUID, e.Config.SandboxGID),
		"-v", "/usr:/usr:ro", p.image)
	return append(args, argv...)
}

// Close removes the image and podman's storage mounts, the containers' cgroup parent, and
// podman's blob cache if the bench made its directory.
func (p *podmanPeer) Close() {
	if p.global == nil {
		return
	}
	_ = exec.Command(p.bin, append(p.global, "rmi", "--all", "--force")...).Run()
	if g, err := cgroups.Load(p.cgroup); err == nil {
		_ = g.Delete()
	}
	if p.varLib {
		os.RemoveAll("/var/lib/containers")
	}
}

// firstBytePeersAbout says what table 1's peers are and how the bench runs them.
func firstBytePeersAbout(runsc *runscPeer, bwrap *bwrapPeer, podman *podmanPeer) string {
	return "`runsc run` (gVisor's runsc at " + runsc.bin + ", global flags as paddock's runner gives them: `" + strings.Join(container.RunscFlags, " ") +
		"`) in the foreground on the bundle paddock writes for its gVisor tier (no user namespace; the Sentry's own kernel), with `/bin/echo hi` as its process; " +
		"`bwrap` (Debian's " + versionOf(bwrap.bin, "--version", "bubblewrap") + ") with every namespace new (`--unshare-all --unshare-user`, the sandbox user mapped), " +
		"the host's /usr read-only and /bin, /lib, … as the host has them, a fresh /proc, /dev and /tmp: the floor of a sandbox made of " +
		"namespaces alone, with no cgroup, no seccomp profile and no runtime state; `podman run --rm --network none` (Debian's " + podman.version +
		", rootful, its storage (overlay), run state and temporary files under the bench's directory, `--cgroup-manager cgroupfs --events-backend none`, " +
		"its OCI runtime the baseline's runc, so that the difference is podman's own (Debian's crun also refuses a hybrid cgroup layout such as this machine's)) of an image imported once with `podman import` " +
		"from a tar of paddock's rootfs, with the host's /usr bound read-only as in the bundle, as the sandbox user, and `--ulimit nofile=1024:1024 " +
		"--ulimit nproc=1024:1024` (podman's defaults are above what root may set here without CAP_SYS_RESOURCE)."
}

// versionOf is the first line of `bin arg`, or name where it says nothing.
func versionOf(bin, arg, name string) string {
	if bin == "" {
		return name
	}
	out, err := exec.Command(bin, arg).CombinedOutput()
	if err != nil || firstLine(out) == "" {
		return name
	}
	return firstLine(out)
}
