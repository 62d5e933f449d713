package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Commands is the name of the child group a sandbox's commands run in, below the
// sandbox's own group, where the agent stays: its memory limit leaves the agent a reserve,
// and each command gets a group of its own below it, which ends with the command.
const Commands = "cmds"

// CommandControllers are the v1 hierarchies a command's group lives in: memory (the
// reserve), pids (the process limit) and freezer (an unescapable kill).
var CommandControllers = []string{"memory", "pids", "freezer"}

// Delegate prepares the group at path (which it creates with limits parent when it does
// not exist) for the sandbox's agent, whose host uid is uid, to run its commands below it
// with limits l, and returns the directories the agent is to be handed, by controller.
//
// On v1 it makes the commands' group itself, with l, and gives it to uid: uid may then
// make groups in it and move processes into those, and nothing else. On v2 the agent
// makes the split itself once it runs (SplitV2): a v2 group with processes cannot pass
// controllers to children, so the agent first moves into a leaf of its own, and the
// commands' group is a sibling; the group is given to uid (its directory, cgroup.procs,
// cgroup.subtree_control and cgroup.threads, as systemd delegates a unit's group), its
// limits and its parent's stay the host's. The key "unified" names the v2 directory.
func Delegate(path string, parent, l Limits, uid int) (map[string]string, error) {
	switch DetectMode() {
	case V1:
		return delegateV1(mountpoint, path, parent, l, uid)
	case V2:
		return delegateV2(mountpoint, path, parent, uid)
	}
	return nil, fmt.Errorf("cgroup %s: no cgroupfs mounted at %s: %w", path, mountpoint, errdefs.ErrUnavailable)
}

// Unified is the key of Delegate's v2 directory.
const Unified = "unified"

func delegateV2(root, path string, parent Limits, uid int) (map[string]string, error) {
	g, err := load(V2, root, path)
	if err != nil {
		if g, err = create(V2, root, path, parent); err != nil {
			return nil, err
		}
	}
	dir := g.dirs[0]
	if uid != 0 {
		for _, f := range []string{"cgroup.procs", "cgroup.subtree_control", "cgroup.threads"} {
			if err := os.Lchown(filepath.Join(dir, f), uid, uid); err != nil {
				return nil, g.wrap(err)
			}
		}
		if err := os.Lchown(dir, uid, uid); err != nil {
			return nil, g.wrap(err)
		}
	}
	return map[string]string{Unified: dir}, nil
}

// SplitV2 makes, in the v2 group at dir that Delegate gave the caller, a leaf "agent"
// that process pid (the agent) moves into, and the commands' group beside it with limits
// l and the controllers the group offers (memory, pids) passed down to it. It returns the
// commands' group.
func SplitV2(dir string, pid int, l Limits) (*Group, error) {
	g := &Group{path: "(handed over)", mode: V2, dirs: []string{dir}}
	for _, d := range []string{"agent", Commands} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, g.wrap(err)
		}
	}
	if err := writeFile(filepath.Join(dir, "agent"), "cgroup.procs", strconv.Itoa(pid)); err != nil {
		return nil, g.wrap(fmt.Errorf("move the agent to its leaf: %w", err))
	}
	offered, err := readFile(dir, "cgroup.controllers")
	if err != nil {
		return nil, g.wrap(err)
	}
	var enable []string
	for _, c := range []string{"memory", "pids"} {
		switch {
		case slices.Contains(strings.Fields(offered), c):
			enable = append(enable, "+"+c)
		case needs(l, c):
			return nil, fmt.Errorf("cgroup %s: the group offers no %s controller: %w", dir, c, errdefs.ErrUnavailable)
		}
	}
	if len(enable) > 0 {
		if err := writeFile(dir, "cgroup.subtree_control", strings.Join(enable, " ")); err != nil {
			return nil, g.wrap(err)
		}
	}
	cmds := &Group{path: g.path + "/" + Commands, mode: V2, dirs: []string{filepath.Join(dir, Commands)}}
	if err := cmds.setLimitsV2(Limits{MemoryBytes: l.MemoryBytes, Pids: l.Pids}); err != nil {
		return nil, cmds.wrap(err)
	}
	return cmds, nil
}

func delegateV1(root, path string, parent, l Limits, uid int) (map[string]string, error) {
	if _, err := load(V1, root, path); err != nil {
		if _, err := create(V1, root, path, parent); err != nil {
			return nil, err
		}
	}
	g, err := create(V1, root, path+"/"+Commands, l)
	if err != nil {
		return nil, err
	}
	dirs := map[string]string{}
	for _, c := range CommandControllers {
		dir := g.controller(c)
		if !slices.Contains(g.dirs, dir) {
			continue
		}
		if uid != 0 {
			if err := chownGroup(dir, uid); err != nil {
				return nil, g.wrap(err)
			}
		}
		dirs[c] = dir
	}
	return dirs, nil
}

// chownGroup gives a group's directory and its interface files to uid.
func chownGroup(dir string, uid int) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.IsDir() {
			if err := os.Lchown(filepath.Join(dir, e.Name()), uid, uid); err != nil {
				return err
			}
		}
	}
	return os.Lchown(dir, uid, uid)
}

// Open returns the v1 group whose directory in each hierarchy dirs gives (controller →
// directory), such as directories handed over as descriptors (/proc/self/fd/N).
func Open(dirs map[string]string) (*Group, error) {
	if len(dirs) == 0 {
		return nil, fmt.Errorf("cgroup: no directories: %w", errdefs.ErrInvalidArgument)
	}
	g := &Group{path: "(handed over)", mode: V1, byController: map[string]string{}}
	for c, d := range dirs {
		g.byController[c] = d
		g.dirs = append(g.dirs, d)
	}
	slices.Sort(g.dirs)
	return g, nil
}

// Command makes the group of one command below a group opened with Open, and opens the
// cgroup.procs files the command writes to join it (the trampoline's join). The group is made in the
// freezer hierarchy alone (pids without one): it is the handle that kills whatever the
// command left, and nothing else. In the other hierarchies the command joins g itself,
// where the kernel's counts (OOM kills, refused forks) outlive the command's group.
func (g *Group) Command(name string) (*Group, []*os.File, error) {
	if name == "" || name == "." || name == ".." || filepath.Base(name) != name {
		return nil, nil, fmt.Errorf("cgroup %s: child %q: want one path segment: %w", g.path, name, errdefs.ErrInvalidArgument)
	}
	if g.mode == V2 {
		return g.commandV2(name)
	}
	own := "freezer"
	if g.byController[own] == "" {
		own = "pids"
	}
	if g.byController[own] == "" {
		return nil, nil, fmt.Errorf("cgroup %s: no freezer or pids hierarchy to hold a command: %w", g.path, errdefs.ErrUnavailable)
	}
	dir := filepath.Join(g.byController[own], name)
	sub := &Group{path: g.path + "/" + name, mode: g.mode, byController: map[string]string{own: dir}, dirs: []string{dir}}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, nil, sub.wrap(err)
	}
	var files []*os.File
	for _, c := range slices.Sorted(maps.Keys(g.byController)) {
		d := g.byController[c]
		if c == own {
			d = dir
		}
		f, err := os.OpenFile(filepath.Join(d, "cgroup.procs"), os.O_WRONLY, 0)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			_ = sub.Delete()
			return nil, nil, sub.wrap(err)
		}
		files = append(files, f)
	}
	return sub, files, nil
}

// commandV2 is Command on v2: the command's group is a child of the commands' group, to
// which it passes no controller (its memory and pids count in the commands' group), and
// cgroup.kill ends it.
func (g *Group) commandV2(name string) (*Group, []*os.File, error) {
	dir := filepath.Join(g.dirs[0], name)
	sub := &Group{path: g.path + "/" + name, mode: V2, dirs: []string{dir}}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, nil, sub.wrap(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "cgroup.procs"), os.O_WRONLY, 0)
	if err != nil {
		_ = sub.Delete()
		return nil, nil, sub.wrap(err)
	}
	return sub, []*os.File{f}, nil
}
