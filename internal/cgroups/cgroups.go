// Package cgroups puts sandbox processes in a Linux control group, limits the group's memory,
// CPU and process count, reads what the kernel did to it (OOM kills, refused forks), and
// kills everything in it.
//
// Both cgroup versions exist because hosts differ. Production hosts run the unified hierarchy
// (cgroup v2: /sys/fs/cgroup is cgroup2fs, one directory per group). Others, including the
// development machines, run v1 in hybrid mode: each controller has its own hierarchy under
// /sys/fs/cgroup/<controller>, and the cgroup2 mount at /sys/fs/cgroup/unified has no
// controllers, so nothing can be limited through it. [Group] hides the difference; the version
// is detected once per process by [DetectMode].
//
// What v1 lacks and how this package makes up for it:
//   - No cgroup.kill. [Group.Kill] freezes the group (freezer.state), sends SIGKILL to every
//     process listed in it, thaws it, and repeats until it is empty. While frozen nothing in
//     the group can fork or exit, so no process escapes the sweep and no pid is recycled
//     between listing and signalling.
//   - No memory.events. OOM kills are read from the oom_kill line of memory.oom_control. v1
//     counts them only in the cgroup the victim was in, so the count is summed over the
//     group's descendants; v2's memory.events is already hierarchical.
//   - No memory.swap.max. Where the kernel accounts swap (memory.memsw.limit_in_bytes exists),
//     the memory+swap limit is set equal to the memory limit, which forbids swapping, as
//     memory.swap.max=0 does on v2. Without swap accounting the limit covers memory alone.
//   - No CLONE_INTO_CGROUP. A caller starts its process blocked (on a pipe, say), moves it in
//     with [Group.Add], then lets it go, so it never runs untrusted code outside its limits.
//     The same order works on v2.
//   - One directory per controller. On v1 a group is a directory in each hierarchy; Add,
//     Pids, Kill and Delete act on all of them.
//
// Threat model: the group is what stops a sandboxed process from exhausting the host's memory,
// CPU or process table, and the handle by which every process a sandbox started is killed,
// including ones that left its session and process group. A process inside must not be able
// to write cgroupfs (the sandbox mounts it read-only or not at all); only its agent is handed
// a subtree, as descriptors, to run its commands in (Delegate), which the commands cannot
// write either. This package trusts the kernel's files and never the sandbox.
//
// The interface files are read and written directly, as runc does. Only the mode detector
// comes from github.com/containerd/cgroups/v3: its cgroup1 and cgroup2 managers need modules
// (systemd and D-Bus clients, eBPF) this module does not carry, for features paddock does not
// use, and the handful of files needed here are plain to handle.
//
// A group's path is a cgroup path such as "/paddock/<sandbox-id>", relative to the cgroupfs
// mount: the string runc takes as the OCI cgroupsPath with its cgroupfs driver.
package cgroups

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	containerd "github.com/containerd/cgroups/v3"
	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// mountpoint is where cgroupfs is mounted on every host paddock supports.
const mountpoint = "/sys/fs/cgroup"

// Mode is the cgroup interface a host offers.
type Mode int

const (
	// Unavailable means no cgroupfs is mounted at /sys/fs/cgroup.
	Unavailable Mode = iota
	// V1 is the legacy or hybrid layout: one hierarchy per controller.
	V1
	// V2 is the unified hierarchy.
	V2
)

func (m Mode) String() string {
	switch m {
	case V1:
		return "cgroup v1"
	case V2:
		return "cgroup v2"
	}
	return "no cgroups"
}

// DetectMode reports the host's cgroup interface. A hybrid host is V1: its cgroup2 mount holds
// no controllers.
func DetectMode() Mode {
	switch containerd.Mode() {
	case containerd.Unified:
		return V2
	case containerd.Legacy, containerd.Hybrid:
		return V1
	}
	return Unavailable
}

// cfsPeriod is the CPU bandwidth period in microseconds; Limits.CPUs is a share of it.
const cfsPeriod = 100000

// The kernel rejects a CPU quota below 1ms; above maxCPUs the quota would exceed its range.
const (
	minCPUs = 1000.0 / cfsPeriod
	maxCPUs = 1 << 16
)

// Limits are the resources a group may use. A zero field means no limit.
type Limits struct {
	// MemoryBytes caps the group's memory. Where the kernel accounts swap, swap is forbidden
	// too, so the cap cannot be dodged by swapping. A group that exceeds it has a process
	// killed by the kernel (see Group.OOMKills).
	MemoryBytes int64
	// CPUs caps CPU time as a count of CPUs: 0.5 is half of one CPU, 2 is two whole CPUs,
	// enforced over every 100ms period. At least 0.01 when set.
	CPUs float64
	// Pids caps the number of processes and threads in the group; fork fails beyond it.
	Pids int64
}

// Validate reports the first field that cannot be applied, as an errdefs.ErrInvalidArgument
// naming it.
func (l Limits) Validate() error {
	switch {
	case l.MemoryBytes < 0:
		return fmt.Errorf("limits: MemoryBytes is %d, must be 0 (unlimited) or positive: %w", l.MemoryBytes, errdefs.ErrInvalidArgument)
	case math.IsNaN(l.CPUs) || l.CPUs < 0 || l.CPUs > maxCPUs || (l.CPUs > 0 && l.CPUs < minCPUs):
		return fmt.Errorf("limits: CPUs is %v, must be 0 (unlimited) or between %v and %v: %w", l.CPUs, minCPUs, maxCPUs, errdefs.ErrInvalidArgument)
	case l.Pids < 0:
		return fmt.Errorf("limits: Pids is %d, must be 0 (unlimited) or positive: %w", l.Pids, errdefs.ErrInvalidArgument)
	}
	return nil
}

// cpuQuota is the CFS quota in microseconds per cfsPeriod for l.CPUs; 0 when unlimited.
func (l Limits) cpuQuota() int64 {
	return int64(math.Round(l.CPUs * cfsPeriod))
}

// Group is a cgroup on the host. Its methods are safe for concurrent use.
type Group struct {
	path string
	mode Mode
	root string // the cgroupfs mount; a fake tree in tests
	// dirs are the group's directories: on v1 one per hierarchy that holds it, on v2 one.
	dirs []string
	// byController, when set, is where each v1 controller's directory is (Open): the
	// group was handed over, and root and path name nothing.
	byController map[string]string
}

// Create makes the cgroup at path (such as "/paddock/<id>") with limits l, creating its
// parents as needed. It fails with errdefs.ErrAlreadyExists if the group exists, and with
// errdefs.ErrUnavailable if a limit needs a controller the host lacks.
func Create(path string, l Limits) (*Group, error) {
	return create(DetectMode(), mountpoint, path, l)
}

// Load opens the existing cgroup at path, such as one runc made for a container. It fails with
// errdefs.ErrNotFound when there is none.
func Load(path string) (*Group, error) {
	return load(DetectMode(), mountpoint, path)
}

func create(mode Mode, root, path string, l Limits) (*Group, error) {
	if err := checkPath(path); err != nil {
		return nil, err
	}
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", path, err)
	}
	switch mode {
	case V1:
		return createV1(root, path, l)
	case V2:
		return createV2(root, path, l)
	}
	return nil, fmt.Errorf("cgroup %s: no cgroupfs mounted at %s: %w", path, root, errdefs.ErrUnavailable)
}

func load(mode Mode, root, path string) (*Group, error) {
	if err := checkPath(path); err != nil {
		return nil, err
	}
	switch mode {
	case V1:
		return loadV1(root, path)
	case V2:
		return loadV2(root, path)
	}
	return nil, fmt.Errorf("cgroup %s: no cgroupfs mounted at %s: %w", path, root, errdefs.ErrUnavailable)
}

// checkPath accepts only clean absolute paths below the root, so a path cannot climb out of
// cgroupfs or name the root group.
func checkPath(path string) error {
	if path == "/" || !strings.HasPrefix(path, "/") || filepath.Clean(path) != path {
		return fmt.Errorf("cgroup path %q: must be a clean absolute path below /, like /paddock/<id>: %w", path, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Path returns the group's cgroup path, as given to Create or Load.
func (g *Group) Path() string { return g.path }

// Add moves the process pid, with all its threads, into the group.
func (g *Group) Add(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("cgroup %s: add pid %d: %w", g.path, pid, errdefs.ErrInvalidArgument)
	}
	for _, dir := range g.dirs {
		if err := writeFile(dir, "cgroup.procs", fmt.Sprint(pid)); err != nil {
			if errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("cgroup %s: add pid %d: no such process: %w", g.path, pid, errdefs.ErrNotFound)
			}
			return g.wrap(fmt.Errorf("add pid %d: %w", pid, err))
		}
	}
	return nil
}

// OOMKills returns how many processes in the group (and its descendants) the kernel has
// killed for exceeding the memory limit.
func (g *Group) OOMKills() (uint64, error) {
	if g.mode == V1 {
		return g.oomKillsV1()
	}
	return g.oomKillsV2()
}

// ForksRefused returns how many forks (and new threads) a pids limit has refused to
// processes in the group and its descendants. A count that grew while a command ran says
// the command, or something beside it, met the limit. Kernels without the count (before
// 4.3 on v1) give errdefs.ErrUnavailable.
//
// The count is the "max" line of pids.events, which v1, and v2 before Linux 6.13, keep
// in the cgroup of the process whose fork failed, so it is summed over the subtree. Since
// 6.13 v2's pids.events counts where the limit was and up the tree instead; its old,
// local count is pids.events.local, summed the same way.
func (g *Group) ForksRefused() (uint64, error) {
	dir, file := g.dirs[0], "pids.events"
	if g.mode == V1 {
		dir = g.controller("pids")
	} else if exists(dir, "pids.events.local") {
		file = "pids.events.local"
	}
	dirs, err := subtree(dir)
	if err != nil {
		return 0, g.wrap(err)
	}
	var total uint64
	for _, d := range dirs {
		n, err := readKeyed(d, file, "max")
		switch {
		case errors.Is(err, fs.ErrNotExist) && d != dir:
			continue // removed meanwhile
		case errors.Is(err, fs.ErrNotExist):
			return 0, fmt.Errorf("cgroup %s: no %s (kernel before 4.3, or no pids controller): %w", g.path, file, errdefs.ErrUnavailable)
		case err != nil:
			return 0, g.wrap(err)
		}
		total += n
	}
	return total, nil
}

// MemoryLimit returns the group's memory limit in bytes; 0 means unlimited.
func (g *Group) MemoryLimit() (int64, error) {
	if g.mode == V1 {
		return g.memoryLimitV1()
	}
	return g.memoryLimitV2()
}

// Pids returns the processes in the group and its descendants, sorted.
func (g *Group) Pids() ([]int, error) {
	pids, err := g.pids()
	if err != nil {
		return nil, g.wrap(err)
	}
	return pids, nil
}

func (g *Group) pids() ([]int, error) {
	set := map[int]bool{}
	for _, dir := range g.dirs {
		if err := collectPids(dir, set); err != nil {
			return nil, err
		}
	}
	pids := make([]int, 0, len(set))
	for pid := range set {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	return pids, nil
}

// Kill sends SIGKILL to every process in the group and its descendants, and returns once the
// group is empty. If ctx ends first, it returns ctx's error with how many remain. A group that
// no longer exists holds nothing, so killing it is a no-op.
func (g *Group) Kill(ctx context.Context) error {
	delay := time.Millisecond
	for {
		pids, err := g.Pids()
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("cgroup %s: kill: %d processes remain: %w", g.path, len(pids), err)
		}
		// A group removed meanwhile (its runtime deleted it) shows up as empty next round.
		if err := g.killAll(ctx); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return g.wrap(fmt.Errorf("kill: %w", err))
		}
		sleep(ctx, delay)
		delay = min(2*delay, 50*time.Millisecond)
	}
}

func (g *Group) killAll(ctx context.Context) error {
	if g.mode == V1 {
		return g.killAllV1(ctx)
	}
	return g.killAllV2(ctx)
}

// Delete removes the group and any groups below it. The group must be empty (see Kill); it
// fails with errdefs.ErrFailedPrecondition otherwise. Deleting a group that does not exist
// succeeds.
func (g *Group) Delete() error {
	for _, dir := range g.dirs {
		if err := removeTree(dir); err != nil {
			if errors.Is(err, unix.EBUSY) {
				return fmt.Errorf("cgroup %s: delete: processes remain, kill them first: %w", g.path, errdefs.ErrFailedPrecondition)
			}
			return g.wrap(fmt.Errorf("delete: %w", err))
		}
	}
	return nil
}

// wrap adds the group's path to err and places it in the error taxonomy where the cause
// is clear.
func (g *Group) wrap(err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("cgroup %s: %w: %w", g.path, errdefs.ErrNotFound, err)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("cgroup %s: %w: %w", g.path, errdefs.ErrPermissionDenied, err)
	}
	return fmt.Errorf("cgroup %s: %w", g.path, err)
}

// signalAll sends SIGKILL to every process in the group. A process that is already gone is
// not an error.
func (g *Group) signalAll() error {
	pids, err := g.pids()
	if err != nil {
		return err
	}
	for _, pid := range pids {
		if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("signal pid %d: %w", pid, err)
		}
	}
	return nil
}

// freezeTimeout bounds a freeze: a task stuck in uninterruptible sleep can keep a group
// freezing forever, and killing without the freeze is better than not killing.
const freezeTimeout = time.Second

// freeze writes value to file in dir and waits until frozen reports true, ctx ends, or
// freezeTimeout passes; the caller kills either way.
func freeze(ctx context.Context, dir, file, value string, frozen func() (bool, error)) error {
	if err := writeFile(dir, file, value); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, freezeTimeout)
	defer cancel()
	for delay := 100 * time.Microsecond; ctx.Err() == nil; delay = min(2*delay, 10*time.Millisecond) {
		if ok, err := frozen(); ok || err != nil {
			return err
		}
		sleep(ctx, delay)
	}
	return nil
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
