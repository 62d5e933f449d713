package cgroups

import (
	"bufio"
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

// writeFile writes value to the interface file name in dir. The file must exist: a missing
// one means the controller is not enabled there, and creating it would hide that.
func writeFile(dir, name, value string) error {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func readFile(dir, name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	return strings.TrimSpace(string(b)), err
}

func exists(dir, name string) bool {
	_, err := os.Stat(filepath.Join(dir, name))
	return err == nil
}

// readKeyed returns the value of key in a flat-keyed file ("key value" per line), such as
// memory.events or memory.oom_control.
func readKeyed(dir, name, key string) (uint64, error) {
	s, err := readFile(dir, name)
	if err != nil {
		return 0, err
	}
	v, err := parseKeyed(s, key)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
	}
	return v, nil
}

func parseKeyed(s, key string) (uint64, error) {
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %q line: %w", key, errdefs.ErrUnavailable)
}

// parsePids parses a cgroup.procs file: one pid per line.
func parsePids(s string) ([]int, error) {
	var pids []int
	for _, f := range strings.Fields(s) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("bad pid %q", f)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// subtree returns dir and every cgroup below it, each child before its parent, so they can
// be removed in order. Only a missing dir is an error; descendants may vanish meanwhile.
func subtree(dir string) ([]string, error) {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil && p == dir:
			return err
		case err != nil && errors.Is(err, fs.ErrNotExist):
			return nil
		case err != nil:
			return err
		case d.IsDir():
			dirs = append(dirs, p)
		}
		return nil
	})
	slices.Reverse(dirs)
	return dirs, err
}

// collectPids adds the processes in dir and below it to set.
func collectPids(dir string, set map[int]bool) error {
	dirs, err := subtree(dir)
	if err != nil {
		return err
	}
	for _, d := range dirs {
		s, err := readFile(d, "cgroup.procs")
		if errors.Is(err, fs.ErrNotExist) && d != dir {
			continue
		}
		if err != nil {
			return err
		}
		pids, err := parsePids(s)
		if err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(d, "cgroup.procs"), err)
		}
		for _, pid := range pids {
			set[pid] = true
		}
	}
	return nil
}

// removeTree removes dir and the cgroups below it. A missing dir is already removed.
func removeTree(dir string) error {
	dirs, err := subtree(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}
