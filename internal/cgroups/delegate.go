package cgroups

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Commands is the name of the child group a sandbox's commands run in, below the
// sandbox's own group, where the agent stays: its memory limit leaves the agent a reserve,
// and each command gets a group of its own below it, which ends with the command.
const Commands = "cmds"

// CommandControllers are the v1 hierarchies a command's group lives in: memory (the
// reserve), pids (the process limit) and freezer (an unescapable kill).
var CommandControllers = []string{"memory", "pids", "freezer"}

// Delegate makes the commands' group below the group at path (which it creates with
// limits parent when it does not exist), with limits l, and gives it to uid: uid may then
// make groups in it and move processes into those, and nothing else. It returns the
// group's directories by controller (v1), for the agent to be handed. On v2 it refuses
// with errdefs.ErrUnavailable: there the agent's own group would have to be a leaf beside
// the commands', outside the container's cgroup namespace.
func Delegate(path string, parent, l Limits, uid int) (map[string]string, error) {
	mode := DetectMode()
	if mode != V1 {
		return nil, fmt.Errorf("cgroup %s: a commands' group for the agent to manage is made on cgroup v1 hosts only: %w", path, errdefs.ErrUnavailable)
	}
	return delegateV1(mountpoint, path, parent, l, uid)
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
// cgroup.procs files the command writes to join it (JoinFiles). The group is made in the
// freezer hierarchy alone (pids without one): it is the handle that kills whatever the
// command left, and nothing else. In the other hierarchies the command joins g itself,
// where the kernel's counts (OOM kills, refused forks) outlive the command's group.
func (g *Group) Command(name string) (*Group, []*os.File, error) {
	if name == "" || name == "." || name == ".." || filepath.Base(name) != name {
		return nil, nil, fmt.Errorf("cgroup %s: child %q: want one path segment: %w", g.path, name, errdefs.ErrInvalidArgument)
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

// JoinFiles moves the calling process into the group each of fds (cgroup.procs files
// opened for writing) belongs to, and closes them.
func JoinFiles(fds []*os.File) error {
	for _, f := range fds {
		_, err := f.WriteString("0")
		f.Close()
		if err != nil {
			return fmt.Errorf("join cgroup through %s: %w", f.Name(), err)
		}
	}
	return nil
}
