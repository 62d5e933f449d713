package cgroups

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// These tests need no root: they check validation, and run the file handling of both
// versions against fake cgroupfs trees laid out as the kernel lays them out. They are the only
// coverage v2 gets on a v1 host.

func TestLimitsValidate(t *testing.T) {
	tests := []struct {
		name  string
		l     Limits
		field string // "" when valid
	}{
		{"zero is unlimited", Limits{}, ""},
		{"all set", Limits{MemoryBytes: 1 << 30, CPUs: 1.5, Pids: 100}, ""},
		{"more CPUs than the host", Limits{CPUs: 4096}, ""},
		{"smallest CPU share", Limits{CPUs: 0.01}, ""},
		{"negative memory", Limits{MemoryBytes: -1}, "MemoryBytes"},
		{"negative CPUs", Limits{CPUs: -0.5}, "CPUs"},
		{"NaN CPUs", Limits{CPUs: math.NaN()}, "CPUs"},
		{"infinite CPUs", Limits{CPUs: math.Inf(1)}, "CPUs"},
		{"CPU quota under 1ms", Limits{CPUs: 0.001}, "CPUs"},
		{"negative pids", Limits{Pids: -3}, "Pids"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.l.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("Validate() = %v, want ErrInvalidArgument naming %s", err, tt.field)
			}
		})
	}
}

func TestCreateRejectsBadInput(t *testing.T) {
	root := t.TempDir() // never written: validation comes first
	tests := []struct {
		path string
		l    Limits
	}{
		{"", Limits{}},
		{"paddock/x", Limits{}},
		{"/", Limits{}},
		{"/paddock/../../etc", Limits{}},
		{"/paddock/x/", Limits{}},
		{"/paddock//x", Limits{}},
		{"/paddock/./x", Limits{}},
		{"/paddock/x", Limits{Pids: -1}},
	}
	for _, mode := range []Mode{V1, V2} {
		for _, tt := range tests {
			if _, err := create(mode, root, tt.path, tt.l); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%v: create(%q, %+v) = %v, want ErrInvalidArgument", mode, tt.path, tt.l, err)
			}
			if tt.l == (Limits{}) {
				if _, err := load(mode, root, tt.path); !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Errorf("%v: load(%q) = %v, want ErrInvalidArgument", mode, tt.path, err)
				}
			}
		}
	}
	if _, err := create(Unavailable, root, "/paddock/x", Limits{}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("create without cgroupfs = %v, want ErrUnavailable", err)
	}
}

// fakeTree writes files (path relative to root → content) under a new root and returns it.
func fakeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestV2Files(t *testing.T) {
	root := fakeTree(t, map[string]string{
		"paddock/a/memory.events":    "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n",
		"paddock/a/memory.max":       "33554432\n",
		"paddock/a/cgroup.procs":     "10\n12\n",
		"paddock/a/sub/cgroup.procs": "11\n",
		"paddock/a/pids.events":      "max 4\n",
		"paddock/a/sub/pids.events":  "max 3\n",
		"paddock/b/memory.events":    "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n",
		"paddock/b/memory.max":       "max\n",
		"paddock/b/cgroup.procs":     "",
		// Linux 6.13 on: pids.events is hierarchical (and counts where the limit was); the
		// local count is pids.events.local.
		"paddock/b/pids.events":           "max 9\n",
		"paddock/b/pids.events.local":     "max 1\n",
		"paddock/b/sub/pids.events":       "max 9\n",
		"paddock/b/sub/pids.events.local": "max 8\n",
		"paddock/c/cgroup.procs":          "",
	})

	if _, err := load(V2, root, "/paddock/missing"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("load of a missing group = %v, want ErrNotFound", err)
	}
	a, err := load(V2, root, "/paddock/a")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := a.OOMKills(); err != nil || n != 2 {
		t.Errorf("OOMKills() = %d, %v; want 2", n, err)
	}
	if m, err := a.MemoryLimit(); err != nil || m != 32<<20 {
		t.Errorf("MemoryLimit() = %d, %v; want %d", m, err, 32<<20)
	}
	if pids, err := a.Pids(); err != nil || !slices.Equal(pids, []int{10, 11, 12}) {
		t.Errorf("Pids() = %v, %v; want [10 11 12] (the group and its descendants)", pids, err)
	}

	b, err := load(V2, root, "/paddock/b")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := b.OOMKills(); err != nil || n != 0 {
		t.Errorf("OOMKills() = %d, %v; want 0", n, err)
	}
	if m, err := b.MemoryLimit(); err != nil || m != 0 {
		t.Errorf("MemoryLimit() of memory.max=max = %d, %v; want 0 (unlimited)", m, err)
	}
	if n, err := a.ForksRefused(); err != nil || n != 7 {
		t.Errorf("ForksRefused() = %d, %v; want 7 (counted where the fork failed, so descendants add up)", n, err)
	}
	if n, err := b.ForksRefused(); err != nil || n != 9 {
		t.Errorf("ForksRefused() with pids.events.local = %d, %v; want 9, the local counts summed", n, err)
	}
	c, err := load(V2, root, "/paddock/c")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ForksRefused(); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("ForksRefused() without pids.events = %v, want ErrUnavailable", err)
	}
}

func TestV2Delegate(t *testing.T) {
	root := fakeTree(t, map[string]string{
		"cgroup.subtree_control":         "",
		"paddock/cgroup.subtree_control": "",
	})
	if err := delegate(root, filepath.Join(root, "paddock"), []string{"+memory", "+cpu", "+pids"}); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{root, filepath.Join(root, "paddock")} {
		if got, _ := readFile(dir, "cgroup.subtree_control"); got != "+memory +cpu +pids" {
			t.Errorf("%s/cgroup.subtree_control = %q, want %q", dir, got, "+memory +cpu +pids")
		}
	}
}

func TestV2SetLimits(t *testing.T) {
	root := fakeTree(t, map[string]string{
		"paddock/a/memory.max":      "max",
		"paddock/a/memory.swap.max": "max",
		"paddock/a/cpu.max":         "max 100000",
		"paddock/a/pids.max":        "max",
	})
	g, err := load(V2, root, "/paddock/a")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.setLimitsV2(Limits{MemoryBytes: 64 << 20, CPUs: 1.5, Pids: 7}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"memory.max":      "67108864",
		"memory.swap.max": "0",
		"cpu.max":         "150000 100000",
		"pids.max":        "7",
	} {
		if got, _ := readFile(g.dirs[0], name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

func TestV2KillUsesCgroupKill(t *testing.T) {
	root := fakeTree(t, map[string]string{
		"paddock/a/cgroup.kill":  "",
		"paddock/a/cgroup.procs": "",
	})
	g, err := load(V2, root, "/paddock/a")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.killAllV2(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, _ := readFile(g.dirs[0], "cgroup.kill"); got != "1" {
		t.Errorf("cgroup.kill = %q, want 1", got)
	}
}

func TestV1Files(t *testing.T) {
	root := fakeTree(t, map[string]string{
		"memory/paddock/a/memory.oom_control":     "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
		"memory/paddock/a/memory.limit_in_bytes":  "9223372036854771712\n",
		"memory/paddock/a/cgroup.procs":           "5\n",
		"memory/paddock/a/sub/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
		"memory/paddock/a/sub/cgroup.procs":       "6\n",
		"pids/paddock/a/cgroup.procs":             "5\n7\n",
		"pids/paddock/a/pids.events":              "max 2\n",
		"pids/paddock/a/sub/pids.events":          "max 1\n",
		"memory/paddock/b/memory.oom_control":     "oom_kill_disable 0\nunder_oom 0\n",
		"memory/paddock/b/memory.limit_in_bytes":  "16777216\n",
	})
	if err := os.Symlink("memory", filepath.Join(root, "memsym")); err != nil {
		t.Fatal(err)
	}

	a, err := load(V1, root, "/paddock/a")
	if err != nil {
		t.Fatal(err)
	}
	if len(a.dirs) != 2 {
		t.Errorf("dirs = %v, want the memory and pids hierarchies (symlinks skipped)", a.dirs)
	}
	if n, err := a.OOMKills(); err != nil || n != 5 {
		t.Errorf("OOMKills() = %d, %v; want 5 (v1 counts per cgroup, so descendants add up)", n, err)
	}
	if m, err := a.MemoryLimit(); err != nil || m != 0 {
		t.Errorf("MemoryLimit() of the v1 unlimited value = %d, %v; want 0", m, err)
	}
	if n, err := a.ForksRefused(); err != nil || n != 3 {
		t.Errorf("ForksRefused() = %d, %v; want 3 (v1 counts per cgroup)", n, err)
	}
	if pids, err := a.Pids(); err != nil || !slices.Equal(pids, []int{5, 6, 7}) {
		t.Errorf("Pids() = %v, %v; want [5 6 7] (every hierarchy, with descendants)", pids, err)
	}

	b, err := load(V1, root, "/paddock/b")
	if err != nil {
		t.Fatal(err)
	}
	if m, err := b.MemoryLimit(); err != nil || m != 16<<20 {
		t.Errorf("MemoryLimit() = %d, %v; want %d", m, err, 16<<20)
	}
	if _, err := b.OOMKills(); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("OOMKills() without an oom_kill line (kernel < 4.13) = %v, want ErrUnavailable", err)
	}
	if _, err := load(V1, root, "/paddock/missing"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("load of a missing group = %v, want ErrNotFound", err)
	}
}

func TestParsePids(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		ok   bool
	}{
		{"", nil, true},
		{"1\n22\n333\n", []int{1, 22, 333}, true},
		{"1\nx\n", nil, false},
		{"0\n", nil, false},
		{"-4\n", nil, false},
	}
	for _, tt := range tests {
		got, err := parsePids(tt.in)
		if (err == nil) != tt.ok || !slices.Equal(got, tt.want) {
			t.Errorf("parsePids(%q) = %v, %v; want %v, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}
