package cgroups

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// v1Controllers are the hierarchies a created v1 group lives in: the three that limit it,
// and freezer, which Kill needs in place of cgroup.kill.
var v1Controllers = []string{"memory", "cpu", "pids", "freezer"}

// v1Unlimited is the smallest value v1 reports for "no limit": the kernel shows LONG_MAX
// rounded down to a page.
const v1Unlimited = 1 << 62

func createV1(root, path string, l Limits) (_ *Group, err error) {
	g := &Group{path: path, mode: V1, root: root}
	defer func() {
		if err != nil {
			_ = g.Delete() // best effort: remove what this call made
		}
	}()
	for _, c := range v1Controllers {
		if !exists(root, c) {
			if needs(l, c) {
				return nil, fmt.Errorf("cgroup %s: the %s controller is not mounted at %s: %w", path, c, filepath.Join(root, c), errdefs.ErrUnavailable)
			}
			continue
		}
		dir := filepath.Join(root, c, path)
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return nil, g.wrap(err)
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return nil, fmt.Errorf("cgroup %s: %w", path, errdefs.ErrAlreadyExists)
			}
			return nil, g.wrap(err)
		}
		g.dirs = append(g.dirs, dir)
	}
	if err := g.setLimitsV1(l); err != nil {
		return nil, g.wrap(err)
	}
	return g, nil
}

// needs reports whether l sets a limit enforced by controller c.
func needs(l Limits, c string) bool {
	switch c {
	case "memory":
		return l.MemoryBytes > 0
	case "cpu":
		return l.CPUs > 0
	case "pids":
		return l.Pids > 0
	}
	return false
}

func (g *Group) setLimitsV1(l Limits) error {
	if l.MemoryBytes > 0 {
		mem := g.controller("memory")
		v := strconv.FormatInt(l.MemoryBytes, 10)
		if err := writeFile(mem, "memory.limit_in_bytes", v); err != nil {
			return err
		}
		// Only kernels that account swap have memsw; without it there is no swap to limit.
		if exists(mem, "memory.memsw.limit_in_bytes") {
			if err := writeFile(mem, "memory.memsw.limit_in_bytes", v); err != nil {
				return err
			}
		}
	}
	if l.CPUs > 0 {
		cpu := g.controller("cpu")
		if err := writeFile(cpu, "cpu.cfs_period_us", strconv.Itoa(cfsPeriod)); err != nil {
			return err
		}
		if err := writeFile(cpu, "cpu.cfs_quota_us", strconv.FormatInt(l.cpuQuota(), 10)); err != nil {
			return err
		}
	}
	if l.Pids > 0 {
		if err := writeFile(g.controller("pids"), "pids.max", strconv.FormatInt(l.Pids, 10)); err != nil {
			return err
		}
	}
	return nil
}

// loadV1 finds the group in every hierarchy that holds it: runc makes it in all of them, and
// Pids and Delete must see every one.
func loadV1(root, path string) (*Group, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", path, err)
	}
	g := &Group{path: path, mode: V1, root: root}
	for _, e := range entries {
		// Co-mounted controllers appear once as a directory (cpu,cpuacct) and again as
		// symlinks (cpu, cpuacct); DirEntry.IsDir is false for the symlinks.
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, e.Name(), path)
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			g.dirs = append(g.dirs, dir)
		}
	}
	if len(g.dirs) == 0 {
		return nil, fmt.Errorf("cgroup %s: %w", path, errdefs.ErrNotFound)
	}
	return g, nil
}

// controller returns the group's directory in the hierarchy of controller c.
func (g *Group) controller(c string) string {
	if g.byController != nil {
		return g.byController[c]
	}
	return filepath.Join(g.root, c, g.path)
}

func (g *Group) oomKillsV1() (uint64, error) {
	// v1 counts an OOM kill only in the victim's own cgroup, so add up the descendants.
	dirs, err := subtree(g.controller("memory"))
	if err != nil {
		return 0, g.wrap(err)
	}
	var total uint64
	for _, d := range dirs {
		n, err := readKeyed(d, "memory.oom_control", "oom_kill")
		if errors.Is(err, fs.ErrNotExist) && d != g.controller("memory") {
			continue // removed meanwhile
		}
		if err != nil {
			return 0, g.wrap(err)
		}
		total += n
	}
	return total, nil
}

func (g *Group) memoryLimitV1() (int64, error) {
	s, err := readFile(g.controller("memory"), "memory.limit_in_bytes")
	if err != nil {
		return 0, g.wrap(err)
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, g.wrap(fmt.Errorf("memory.limit_in_bytes: %w", err))
	}
	if v >= v1Unlimited {
		return 0, nil
	}
	return int64(v), nil
}

// killAllV1 freezes the group so nothing in it can fork or exit, SIGKILLs every process, and
// thaws it so the signals are delivered. Without a freezer hierarchy it kills unfrozen.
func (g *Group) killAllV1(ctx context.Context) error {
	dir := g.controller("freezer")
	if !exists(dir, "freezer.state") {
		return g.signalAll()
	}
	err := freeze(ctx, dir, "freezer.state", "FROZEN", func() (bool, error) {
		s, err := readFile(dir, "freezer.state")
		return s == "FROZEN", err
	})
	if err == nil {
		err = g.signalAll()
	}
	return errors.Join(err, writeFile(dir, "freezer.state", "THAWED"))
}
