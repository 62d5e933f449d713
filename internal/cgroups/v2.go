package cgroups

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// v2Controllers are the controllers a v2 group gets, where the host offers them.
var v2Controllers = []string{"memory", "cpu", "pids"}

func createV2(root, path string, l Limits) (_ *Group, err error) {
	offered, err := readFile(root, "cgroup.controllers")
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", path, err)
	}
	var enable []string
	for _, c := range v2Controllers {
		switch {
		case slices.Contains(strings.Fields(offered), c):
			enable = append(enable, "+"+c)
		case needs(l, c):
			return nil, fmt.Errorf("cgroup %s: the host offers no %s controller: %w", path, c, errdefs.ErrUnavailable)
		}
	}
	g := &Group{path: path, mode: V2, root: root}
	dir := filepath.Join(root, path)
	if err := delegate(root, filepath.Dir(dir), enable); err != nil {
		return nil, g.wrap(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("cgroup %s: %w", path, errdefs.ErrAlreadyExists)
		}
		return nil, g.wrap(err)
	}
	g.dirs = []string{dir}
	if err := g.setLimitsV2(l); err != nil {
		_ = g.Delete() // best effort: remove what this call made
		return nil, g.wrap(err)
	}
	return g, nil
}

// delegate creates the directories from root down to parent and has each pass controllers
// (like "+memory") to its children: a v2 controller is usable in a group only if every
// ancestor enables it in cgroup.subtree_control.
func delegate(root, parent string, controllers []string) error {
	rel, err := filepath.Rel(root, parent)
	if err != nil {
		return err
	}
	var parts []string
	if rel != "." {
		parts = strings.Split(rel, string(filepath.Separator))
	}
	dir := root
	for i := 0; ; i++ {
		if len(controllers) > 0 {
			if err := writeFile(dir, "cgroup.subtree_control", strings.Join(controllers, " ")); err != nil {
				return err
			}
		}
		if i == len(parts) {
			return nil
		}
		dir = filepath.Join(dir, parts[i])
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
}

func (g *Group) setLimitsV2(l Limits) error {
	dir := g.dirs[0]
	if l.MemoryBytes > 0 {
		if err := writeFile(dir, "memory.max", strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
			return err
		}
		// Forbid swap, as memsw does on v1, so the limit cannot be dodged by swapping.
		if exists(dir, "memory.swap.max") {
			if err := writeFile(dir, "memory.swap.max", "0"); err != nil {
				return err
			}
		}
	}
	if l.CPUs > 0 {
		if err := writeFile(dir, "cpu.max", fmt.Sprintf("%d %d", l.cpuQuota(), cfsPeriod)); err != nil {
			return err
		}
	}
	if l.Pids > 0 {
		if err := writeFile(dir, "pids.max", strconv.FormatInt(l.Pids, 10)); err != nil {
			return err
		}
	}
	return nil
}

func loadV2(root, path string) (*Group, error) {
	dir := filepath.Join(root, path)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("cgroup %s: %w", path, errdefs.ErrNotFound)
	}
	return &Group{path: path, mode: V2, root: root, dirs: []string{dir}}, nil
}

// oomKillsV2 reads memory.events, which already counts kills in descendants.
func (g *Group) oomKillsV2() (uint64, error) {
	n, err := readKeyed(g.dirs[0], "memory.events", "oom_kill")
	if err != nil {
		return 0, g.wrap(err)
	}
	return n, nil
}

func (g *Group) memoryLimitV2() (int64, error) {
	s, err := readFile(g.dirs[0], "memory.max")
	if err != nil {
		return 0, g.wrap(err)
	}
	if s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, g.wrap(fmt.Errorf("memory.max: %w", err))
	}
	return v, nil
}

// killAllV2 uses cgroup.kill (Linux 5.14), which kills the group and its descendants in the
// kernel with no pid races. Older kernels get the v1 method through cgroup.freeze (5.2).
func (g *Group) killAllV2(ctx context.Context) error {
	dir := g.dirs[0]
	if exists(dir, "cgroup.kill") {
		return writeFile(dir, "cgroup.kill", "1")
	}
	if !exists(dir, "cgroup.freeze") {
		return g.signalAll()
	}
	err := freeze(ctx, dir, "cgroup.freeze", "1", func() (bool, error) {
		n, err := readKeyed(dir, "cgroup.events", "frozen")
		return n == 1, err
	})
	if err == nil {
		err = g.signalAll()
	}
	return errors.Join(err, writeFile(dir, "cgroup.freeze", "0"))
}
