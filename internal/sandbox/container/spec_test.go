package container

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/paddockhq/paddock/internal/wire"
	"golang.org/x/sys/unix"
)

func rlimit(s *specs.Spec, typ string) *specs.POSIXRlimit {
	for i := range s.Process.Rlimits {
		if s.Process.Rlimits[i].Type == typ {
			return &s.Process.Rlimits[i]
		}
	}
	return nil
}

// Under runsc the sandbox's tasks are limited inside gVisor (RLIMIT_NPROC) and the host's
// pids cgroup leaves the Sentry room above that; no OOM score shields the whole Sentry.
// Under runc nothing of that changes.
func TestGvisorLimits(t *testing.T) {
	// Commands limited to 64 tasks: the sandbox as a whole gets the agent's threads more.
	b := bundleSpec{uid: 1000, gid: 1000, limits: wire.Limits{Pids: 64, Memory: 64 << 20}}
	all := b.limits.SandboxPids()
	if all <= 64 {
		t.Fatalf("SandboxPids %d leaves the agent no room above the commands' 64", all)
	}
	runc, err := buildSpec(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := *runc.Linux.Resources.Pids.Limit; got != all {
		t.Errorf("runc pids.max = %d, want %d", got, all)
	}
	if rlimit(runc, "RLIMIT_NPROC") != nil {
		t.Error("runc spec sets RLIMIT_NPROC, which the host counts per user across sandboxes")
	}

	b.userKernel = true
	gv, err := buildSpec(b)
	if err != nil {
		t.Fatal(err)
	}
	if rl := rlimit(gv, "RLIMIT_NPROC"); rl == nil || rl.Hard != uint64(all) || rl.Soft != uint64(all) {
		t.Errorf("runsc RLIMIT_NPROC of the agent = %+v, want the sandbox's %d", rl, all)
	}
	// The commands' own limit is theirs (the trampoline sets it); the command itself is
	// the one task their count leaves out.
	if got := gvisorNproc(b.limits); got != 63 {
		t.Errorf("the commands' RLIMIT_NPROC when limited to 64 = %d, want 63", got)
	}
	if got := *gv.Linux.Resources.Pids.Limit; got != sentryPids(all) || got < 2*all {
		t.Errorf("runsc pids.max = %d, want the Sentry's headroom %d", got, sentryPids(all))
	}
	if gv.Process.OOMScoreAdj != nil {
		t.Errorf("runsc spec sets oomScoreAdj %d, which would apply to the whole Sentry", *gv.Process.OOMScoreAdj)
	}
	if gv.Linux.Seccomp == nil || gv.Linux.Resources.Memory == nil {
		t.Error("runsc spec lost its seccomp profile or memory limit")
	}

	b.limits.Pids = 0
	gv, err = buildSpec(b)
	if err != nil {
		t.Fatal(err)
	}
	if rlimit(gv, "RLIMIT_NPROC") != nil || gv.Linux.Resources.Pids != nil {
		t.Error("runsc spec limits pids though no limit was asked for")
	}
}

// The history store is bound outside /workspace, writable for the agent but never
// executable, and only when the sandbox has one.
func TestHistoryMount(t *testing.T) {
	find := func(ms []specs.Mount) *specs.Mount {
		for i := range ms {
			if ms[i].Destination == wire.HistoryPath {
				return &ms[i]
			}
		}
		return nil
	}
	if m := find(mounts(bundleSpec{workspace: "/ws"})); m != nil {
		t.Fatalf("a sandbox without history gets %+v", m)
	}
	m := find(mounts(bundleSpec{workspace: "/ws", history: "/data/history/sb-x"}))
	if m == nil || m.Source != "/data/history/sb-x" || !slices.Contains(m.Options, "rw") || !slices.Contains(m.Options, "noexec") {
		t.Fatalf("history mount %+v, want /data/history/sb-x rw noexec", m)
	}
	if strings.HasPrefix(wire.HistoryPath, wire.WorkspacePath+"/") {
		t.Fatalf("wire.HistoryPath %s is inside the workspace", wire.HistoryPath)
	}
}

// The user namespace's mappings: every id of the namespace lands in the sandbox's own range
// (the agent on its first id, the sandbox user on sandboxHostID), nothing maps to the host's
// root or outside the range, no id is mapped twice on either side, and the ids below
// 65,535 are all mapped (devpts's tty group, nobody), with the sandbox user's among them.
func TestIDMappings(t *testing.T) {
	base := rangeBase(7)
	for _, id := range []uint32{1000, 1, 65534, 65535, 400123, 0} {
		m := idMappings(base, id)
		inside, outside := map[uint32]bool{}, map[uint32]bool{}
		var low uint32
		for _, r := range m {
			for i := range r.Size {
				c, h := r.ContainerID+i, r.HostID+i
				if inside[c] || outside[h] {
					t.Fatalf("id %d: %v maps %d or %d twice", id, m, c, h)
				}
				inside[c], outside[h] = true, true
				if c < idRangeSize-1 {
					low++
				}
				if h < base || h >= base+idRangeSize {
					t.Errorf("id %d: %v maps %d to %d, outside the range %d-%d", id, m, c, h, base, base+idRangeSize-1)
				}
			}
		}
		if m[0].ContainerID != 0 || m[0].HostID != base {
			t.Errorf("id %d: %v does not map the namespace's root to %d", id, m, base)
		}
		if !inside[id] || !outside[sandboxHostID(base, id)] {
			t.Errorf("id %d: %v does not map the sandbox user to %d", id, m, sandboxHostID(base, id))
		}
		if low != idRangeSize-1 {
			t.Errorf("id %d: %v maps %d ids below 65535, want all", id, m, low)
		}
	}
	if sandboxHostID(base, 1000) == sandboxHostID(rangeBase(8), 1000) || rangeBase(idRanges-1)+idRangeSize-1 >= 1<<32-1 {
		t.Errorf("ranges overlap or reach (uid_t)-1")
	}
	// The workspace is idmapped whoever owns it: the sandbox user's files shown as its id in
	// the range, and the root's files as the agent's, never as the sandbox user's.
	for _, rootOwned := range []bool{true, false} {
		ws := t.TempDir()
		if !rootOwned {
			if os.Geteuid() != 0 {
				continue
			}
			if err := os.Chown(ws, 1000, 1000); err != nil {
				t.Fatal(err)
			}
		}
		s, err := buildSpec(bundleSpec{uid: 1000, gid: 1000, userns: true, idBase: base, workspace: ws})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(s.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.UserNamespace }) {
			t.Errorf("no user namespace in %v", s.Linux.Namespaces)
		}
		for _, m := range s.Mounts {
			if m.Destination != wire.WorkspacePath {
				continue
			}
			if !slices.Contains(m.Options, "idmap") || len(m.UIDMappings) == 0 || len(m.GIDMappings) == 0 {
				t.Fatalf("workspace mount %+v (root-owned %v), want it idmapped", m, rootOwned)
			}
			shown := map[uint32]uint32{}
			for _, r := range m.UIDMappings {
				shown[r.ContainerID] = r.HostID
			}
			if shown[1000] != base+1000 {
				t.Errorf("root-owned %v: the sandbox user's files shown as %d, want %d", rootOwned, shown[1000], base+1000)
			}
			if root, ok := shown[0]; !ok || root != base {
				t.Errorf("root-owned %v: the root's files shown as %d (mapped %v), want the agent's %d", rootOwned, root, ok, base)
			}
		}
	}
	// A workspace of paddock's own, owned on disk by an id of another range (a start
	// before): those files are the sandbox user's.
	old := sandboxHostID(rangeBase(3), 1000)
	s, err := buildSpec(bundleSpec{uid: 1000, gid: 1000, userns: true, idBase: base, workspace: t.TempDir(), diskUID: old, diskGID: old})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range s.Mounts {
		if m.Destination == wire.WorkspacePath && (len(m.UIDMappings) == 0 || m.UIDMappings[0] != (specs.LinuxIDMapping{ContainerID: old, HostID: base + 1000, Size: 1})) {
			t.Errorf("workspace owned by %d on disk: mappings %v, want it shown as %d", old, m.UIDMappings, base+1000)
		}
	}
}

// ownWorkspace gives the sandbox user's files to its range's ids, whether they were the
// sandbox user's own or another range's, and leaves root's files and links' targets alone.
func TestOwnWorkspace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	base := rangeBase(5)
	want := sandboxHostID(base, 1000)
	for _, from := range []uint32{1000, sandboxHostID(rangeBase(9), 1000)} {
		ws, outside := t.TempDir(), filepath.Join(t.TempDir(), "host-file")
		for _, p := range []string{outside, filepath.Join(ws, "f"), filepath.Join(ws, "rootfile")} {
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink(outside, filepath.Join(ws, "link")); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{ws, filepath.Join(ws, "f"), filepath.Join(ws, "link"), outside} {
			if err := os.Lchown(p, int(from), int(from)); err != nil {
				t.Fatal(err)
			}
		}
		if err := ownWorkspace(ws, base, 1000, 1000); err != nil {
			t.Fatal(err)
		}
		for p, owner := range map[string]uint32{ws: want, filepath.Join(ws, "f"): want, filepath.Join(ws, "link"): want, filepath.Join(ws, "rootfile"): 0, outside: from} {
			var st syscall.Stat_t
			if err := syscall.Lstat(p, &st); err != nil || st.Uid != owner || st.Gid != owner {
				t.Errorf("from %d: %s owned by %d:%d, want %d (%v)", from, p, st.Uid, st.Gid, owner, err)
			}
		}
	}
}

// ownHistory gives the whole store to the agent's host id (and back), changing links
// without following them.
func TestOwnHistory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	dir, outside := t.TempDir(), filepath.Join(t.TempDir(), "host-file")
	for _, p := range []string{"objects/ab", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, p), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "objects/ab/cd"), []byte("blob"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(outside, []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	owners := func() map[string]uint32 {
		m := map[string]uint32{}
		filepath.WalkDir(dir, func(p string, _ fs.DirEntry, _ error) error {
			var st unix.Stat_t
			if unix.Lstat(p, &st) == nil {
				m[p] = st.Uid
			}
			return nil
		})
		return m
	}
	for _, want := range []uint32{rangeBase(3), rangeBase(5), 0} {
		if err := ownHistory(dir, want); err != nil {
			t.Fatal(err)
		}
		for p, uid := range owners() {
			if uid != want {
				t.Errorf("%s belongs to %d, want %d", p, uid, want)
			}
		}
		var st unix.Stat_t
		if err := unix.Stat(outside, &st); err != nil || st.Uid != 0 {
			t.Fatalf("the file a link in the store points to changed hands (uid %d, %v)", st.Uid, err)
		}
	}
}
