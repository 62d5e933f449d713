package microvm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// Accel is how QEMU runs a guest's CPU.
type Accel string

const (
	// AccelTCG emulates the guest's CPU: slow, but it needs nothing from the host's
	// kernel, and it keeps KVM out of the attack surface.
	AccelTCG Accel = "tcg"
	// AccelKVM runs the guest on the host's CPU through /dev/kvm.
	AccelKVM Accel = "kvm"
)

// Probe is what DetectAccel found: the accelerator to use and why.
type Probe struct {
	Accel  Accel  `json:"accel"`
	Reason string `json:"reason"`
	// Took is how long the decision took (zero when it came from the cache).
	Took time.Duration `json:"-"`
	// Cached says the decision was read from an earlier probe of this boot.
	Cached bool `json:"-"`
	// Trial names the trial guest ("kvmprobe-…", its cgroup's name), when one was started.
	Trial string `json:"-"`
}

// KVMProbeTimeout bounds the trial guest under KVM: a guest that has not announced its agent
// by then is taken for a hang. Under working KVM the guest announces itself in well under
// a second; under TCG it takes tens of seconds, so the bound cannot be mistaken for slowness.
var KVMProbeTimeout = 5 * time.Second

// kvmGetAPIVersion is the ioctl KVM_GET_API_VERSION (_IO(KVMIO, 0x00)), and kvmAPIVersion
// its answer on every kernel since 2.6.22.
const (
	kvmGetAPIVersion = 0xAE00
	kvmAPIVersion    = 12
)

// DetectAccel decides whether this host's guests can run under KVM. A /dev/kvm that exists
// proves little: in a nested VM without nested virtualization the device opens and the
// guest then hangs at its first instruction (these CI machines). So it boots a trial guest
// (the real kernel and agent, 128 MiB, nothing in its workspace) under KVM with a short
// deadline, and uses KVM only when that guest's agent answered. The decision is kept in
// dir (paddock's state directory) for the rest of this boot of the host, for the same QEMU
// and kernel, so that only the first microVM after a reboot pays for the trial (up to
// KVMProbeTimeout here).
func DetectAccel(ctx context.Context, in Install, agentBin, dir string, uid, gid uint32) Probe {
	// An agent no guest can run proves nothing about KVM: decide nothing, keep nothing.
	if err := CheckAgent(agentBin); err != nil {
		return Probe{Accel: AccelTCG, Reason: err.Error()}
	}
	cache := filepath.Join(dir, "microvm-accel.json")
	key := cacheKey(in)
	if p, ok := readProbe(cache, key); ok {
		p.Cached = true
		return p
	}
	start := time.Now()
	p := probeKVM(ctx, in, agentBin, dir, uid, gid)
	p.Took = time.Since(start)
	if ctx.Err() == nil { // a probe cut short by the caller decided nothing
		writeProbe(cache, key, p)
	}
	return p
}

func probeKVM(ctx context.Context, in Install, agentBin, dir string, uid, gid uint32) Probe {
	if _, err := kvmGroup(); err != nil {
		return Probe{Accel: AccelTCG, Reason: err.Error()}
	}
	id := "kvmprobe-" + randHex(4)
	p := probeTrial(ctx, in, agentBin, dir, uid, gid, id)
	p.Trial = id
	return p
}

// probeTrial boots the trial guest id under KVM and says what came of it.
func probeTrial(ctx context.Context, in Install, agentBin, dir string, uid, gid uint32, id string) Probe {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return Probe{Accel: AccelTCG, Reason: "no room for the trial guest: " + err.Error()}
	}
	base, err := os.MkdirTemp(dir, "kvm-probe-")
	if err != nil {
		return Probe{Accel: AccelTCG, Reason: "no room for the trial guest: " + err.Error()}
	}
	defer os.RemoveAll(base)
	// As the runner lays a sandbox out: directories QEMU's user may traverse, and a
	// workspace of its own.
	ws, sbDir := filepath.Join(base, "workspace"), filepath.Join(base, "sandbox")
	if os.Mkdir(ws, 0o700) != nil || os.Chown(ws, int(uid), int(gid)) != nil || os.Mkdir(sbDir, 0o711) != nil || os.Chmod(base, 0o711) != nil {
		return Probe{Accel: AccelTCG, Reason: fmt.Sprintf("no room for the trial guest in %s", base)}
	}
	sb, err := Start(ctx, Config{
		ID: id, Dir: sbDir, Workspace: ws, Agent: agentBin, UID: uid, GID: gid,
		Install: in, Accel: AccelKVM, Limits: wire.Limits{Memory: MinMemory}, BootTimeout: KVMProbeTimeout,
	})
	if err != nil {
		return Probe{Accel: AccelTCG, Reason: "/dev/kvm is there, but a trial guest under KVM did not boot: " + firstLine(err.Error())}
	}
	defer func() { _ = sb.Destroy(context.WithoutCancel(ctx)) }() // best effort: a trial guest
	ictx, cancel := context.WithTimeout(ctx, KVMProbeTimeout)
	defer cancel()
	if _, err := pb.NewAgentClient(sb.Conn()).Info(ictx, &pb.InfoRequest{}); err != nil {
		return Probe{Accel: AccelTCG, Reason: "/dev/kvm is there, but the agent of a trial guest under KVM did not answer: " + firstLine(err.Error())}
	}
	return Probe{Accel: AccelKVM, Reason: "a trial guest under KVM booted and its agent answered"}
}

// kvmGroup checks that /dev/kvm is a KVM device that QEMU, running as the sandbox's
// unprivileged user, may open through the device's group; it returns that group.
func kvmGroup() (uint32, error) {
	fi, err := os.Stat("/dev/kvm")
	if err != nil {
		return 0, fmt.Errorf("no /dev/kvm: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || fi.Mode()&os.ModeCharDevice == 0 {
		return 0, fmt.Errorf("/dev/kvm is not a character device")
	}
	if fi.Mode().Perm()&0o060 != 0o060 {
		return 0, fmt.Errorf("/dev/kvm has mode %04o: its group cannot open it, so an unprivileged QEMU could not", fi.Mode().Perm())
	}
	fd, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("open /dev/kvm: %w", err)
	}
	defer unix.Close(fd)
	if v, err := unix.IoctlRetInt(fd, kvmGetAPIVersion); err != nil || v != kvmAPIVersion {
		return 0, fmt.Errorf("/dev/kvm answers API version %d (%v), want %d", v, err, kvmAPIVersion)
	}
	return st.Gid, nil
}

// cacheKey names what a probe's answer depends on: this boot of the host, QEMU, and the
// guest kernel.
func cacheKey(in Install) string {
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(boot)) + "|" + in.QEMU + "|" + in.Kernel
}

type cachedProbe struct {
	Key string `json:"key"`
	Probe
}

func readProbe(path, key string) (Probe, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Probe{}, false
	}
	var c cachedProbe
	if json.Unmarshal(b, &c) != nil || c.Key != key || (c.Accel != AccelKVM && c.Accel != AccelTCG) {
		return Probe{}, false
	}
	return c.Probe, true
}

// writeProbe keeps p for later starts; failing to is harmless (the next start probes again).
func writeProbe(path, key string, p Probe) {
	b, err := json.Marshal(cachedProbe{Key: key, Probe: p})
	if err != nil {
		return
	}
	tmp := path + ".tmp"
	if os.WriteFile(tmp, b, 0o600) == nil {
		_ = os.Rename(tmp, path)
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
