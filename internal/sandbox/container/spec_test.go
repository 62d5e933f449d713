package container

import (
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
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
