package container

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
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
	b := bundleSpec{uid: 1000, gid: 1000, limits: Limits{Pids: 100, MemoryBytes: 64 << 20}}
	runc, err := buildSpec(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := *runc.Linux.Resources.Pids.Limit; got != 100 {
		t.Errorf("runc pids.max = %d, want 100", got)
	}
	if rlimit(runc, "RLIMIT_NPROC") != nil {
		t.Error("runc spec sets RLIMIT_NPROC, which the host counts per user across sandboxes")
	}

	b.userKernel = true
	gv, err := buildSpec(b)
	if err != nil {
		t.Fatal(err)
	}
	if rl := rlimit(gv, "RLIMIT_NPROC"); rl == nil || rl.Hard != 100 || rl.Soft != 100 {
		t.Errorf("runsc RLIMIT_NPROC = %+v, want 100/100", rl)
	}
	if got := *gv.Linux.Resources.Pids.Limit; got != sentryPids(100) || got < 2*100 {
		t.Errorf("runsc pids.max = %d, want the Sentry's headroom %d", got, sentryPids(100))
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
			if ms[i].Destination == HistoryPath {
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
	if strings.HasPrefix(HistoryPath, WorkspacePath+"/") {
		t.Fatalf("HistoryPath %s is inside the workspace", HistoryPath)
	}
}

// The user namespace's mappings: the namespace's root is AgentHostID, the sandbox user
// keeps its own id, nothing maps to the host's root, no id is mapped twice on either side,
// and the 65,536 ids below 65,536 are all mapped (devpts's tty group, nobody).
func TestIDMappings(t *testing.T) {
	for _, id := range []uint32{1000, 1, 65535, 400123, 0} {
		m := idMappings(id)
		inside, outside := map[uint32]bool{}, map[uint32]bool{}
		var low uint32
		for _, r := range m {
			for i := range r.Size {
				c, h := r.ContainerID+i, r.HostID+i
				if inside[c] || outside[h] {
					t.Fatalf("id %d: %v maps %d or %d twice", id, m, c, h)
				}
				inside[c], outside[h] = true, true
				if c < 1<<16 {
					low++
				}
			}
			if r.HostID == 0 {
				t.Errorf("id %d: %v maps to the host's root", id, m)
			}
		}
		if m[0].ContainerID != 0 || m[0].HostID != AgentHostID {
			t.Errorf("id %d: %v does not map the namespace's root to %d", id, m, AgentHostID)
		}
		if id != 0 && (!inside[id] || !outside[id]) {
			t.Errorf("id %d: %v does not keep the sandbox user's id", id, m)
		}
		if low != 1<<16 {
			t.Errorf("id %d: %v maps %d ids below 65536, want all", id, m, low)
		}
	}
	b := bundleSpec{uid: 1000, gid: 1000, userns: true, workspace: t.TempDir()}
	s, err := buildSpec(b)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(s.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.UserNamespace }) {
		t.Errorf("no user namespace in %v", s.Linux.Namespaces)
	}
	// A root-owned workspace is idmapped: the root's files shown as the agent's, never as
	// the sandbox user's.
	for _, m := range s.Mounts {
		if m.Destination != WorkspacePath {
			continue
		}
		if !slices.Contains(m.Options, "idmap") || len(m.UIDMappings) == 0 {
			t.Fatalf("root-owned workspace mount %+v, want it idmapped", m)
		}
		for _, r := range m.UIDMappings {
			if r.ContainerID == 0 && r.HostID != AgentHostID {
				t.Errorf("the root's files in the workspace shown as %d, want the agent's %d", r.HostID, AgentHostID)
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
	for _, userns := range []bool{true, false} {
		want := uint32(0)
		if userns {
			want = AgentHostID
		}
		if err := ownHistory(dir, userns); err != nil {
			t.Fatal(err)
		}
		for p, uid := range owners() {
			if uid != want {
				t.Errorf("userns %v: %s belongs to %d, want %d", userns, p, uid, want)
			}
		}
		var st unix.Stat_t
		if err := unix.Stat(outside, &st); err != nil || st.Uid != 0 {
			t.Fatalf("the file a link in the store points to changed hands (uid %d, %v)", st.Uid, err)
		}
	}
}
