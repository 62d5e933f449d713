package kube

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/runner"
)

// What a cluster changes on the host beyond its own directory, and how it is put back.
// Several test processes may run a cluster each at once (go test runs packages in
// parallel): they share a lock and a record under hostStateDir, the first one in saves the
// host's values, and the last one out restores them.
const hostStateDir = "/run/paddock-kube"

// kubeletSysctls are the kernel settings the kubelet sets at start (and the bridge plugin's
// ip_forward), restored when the last cluster stops.
var kubeletSysctls = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops", "net/ipv4/ip_forward"}

// hostRecord is what the first cluster found on the host.
type hostRecord struct {
	Sysctls    map[string]string `json:"sysctls"`
	KubeletDir bool              `json:"kubelet_dir"`  // /var/lib/kubelet existed
	Containerd bool              `json:"containerd"`   // /run/containerd existed
	HostsLine  bool              `json:"hosts_line"`   // /etc/hosts named the node already
	HostsLineB bool              `json:"hosts_line_b"` // and the second node (AddNode)
}

// withHostLock runs f holding the host-wide lock.
func withHostLock(f func() error) error {
	if err := os.MkdirAll(filepath.Join(hostStateDir, "members"), 0o700); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(hostStateDir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", hostStateDir, err)
	}
	defer func() { _ = unix.Flock(int(lock.Fd()), unix.LOCK_UN) }()
	return f()
}

// liveMembers lists the clusters whose test process is still running. The records of
// those that are gone are removed, and what their clusters left is swept away (a test
// binary killed at its timeout never stops its cluster).
func liveMembers() []string {
	dir := filepath.Join(hostStateDir, "members")
	entries, _ := os.ReadDir(dir)
	var live []string
	for _, e := range entries {
		pid, err := strconv.Atoi(strings.SplitN(e.Name(), "-", 2)[0])
		if err != nil || errors.Is(unix.Kill(pid, 0), unix.ESRCH) {
			if clusterDir, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil && len(clusterDir) > 0 {
				sweep(string(clusterDir))
			}
			os.Remove(filepath.Join(dir, e.Name()))
			continue
		}
		live = append(live, e.Name())
	}
	return live
}

// sweep removes what a cluster whose process died left under dir and on the host: its
// containers and shims, mounts, cgroups, bridge and directory.
func sweep(dir string) {
	if !strings.HasPrefix(filepath.Base(dir), "pdkube") {
		return
	}
	killByCmdline(dir)
	c := &Cluster{Dir: dir}
	c.names()
	killCgroupTree(c.cgroupRoot)
	_ = removeCgroupTree(c.cgroupRoot, time.Now().Add(30*time.Second))
	_ = runner.UnmountAll(dir)
	_ = deleteLink(c.bridge)
	_ = os.RemoveAll(dir)
}

// joinHost records this cluster as a member, saving the host's state if it is the first
// one (after putting back what a crashed process left changed), and names the node in
// /etc/hosts.
func joinHost(member, clusterDir string) error {
	return withHostLock(func() error {
		recFile := filepath.Join(hostStateDir, "host.json")
		if len(liveMembers()) == 0 {
			if rec, err := readRecord(recFile); err == nil {
				// A process that ran a cluster died without restoring the host: do it now, so
				// that what is saved below is the host's own.
				if err := restoreHost(rec); err != nil {
					return err
				}
			}
			rec := hostRecord{Sysctls: map[string]string{}}
			for _, k := range kubeletSysctls {
				v, err := os.ReadFile(filepath.Join("/proc/sys", k))
				if err != nil {
					return fmt.Errorf("read sysctl %s: %w", k, err)
				}
				rec.Sysctls[k] = strings.TrimSpace(string(v))
			}
			_, err := os.Stat("/var/lib/kubelet")
			rec.KubeletDir = err == nil
			_, err = os.Stat("/run/containerd")
			rec.Containerd = err == nil
			rec.HostsLine, rec.HostsLineB = hostsNames(NodeName), hostsNames(SecondNodeName)
			b, err := json.Marshal(rec)
			if err != nil {
				return err
			}
			if err := os.WriteFile(recFile, b, 0o600); err != nil {
				return err
			}
		}
		for _, name := range []string{NodeName, SecondNodeName} {
			if err := nameInHosts(name); err != nil {
				return err
			}
		}
		return os.WriteFile(filepath.Join(hostStateDir, "members", member), []byte(clusterDir), 0o600)
	})
}

// nameInHosts maps name to 127.0.0.1 in /etc/hosts, unless it is already.
func nameInHosts(name string) error {
	if hostsNames(name) {
		return nil
	}
	f, err := os.OpenFile("/etc/hosts", os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("name the node in /etc/hosts: %w", err)
	}
	_, err = fmt.Fprintf(f, "127.0.0.1 %s\n", name)
	if err := errors.Join(err, f.Close()); err != nil {
		return fmt.Errorf("name the node in /etc/hosts: %w", err)
	}
	return nil
}

// leaveHost removes this cluster's record; the last one out restores the host.
func leaveHost(member string) error {
	return withHostLock(func() error {
		os.Remove(filepath.Join(hostStateDir, "members", member))
		if len(liveMembers()) > 0 {
			return nil
		}
		recFile := filepath.Join(hostStateDir, "host.json")
		rec, err := readRecord(recFile)
		if err != nil {
			return err
		}
		if err := restoreHost(rec); err != nil {
			return err
		}
		return os.Remove(recFile)
	})
}

func readRecord(file string) (hostRecord, error) {
	var rec hostRecord
	b, err := os.ReadFile(file)
	if err != nil {
		return rec, err
	}
	err = json.Unmarshal(b, &rec)
	return rec, err
}

// restoreHost puts the sysctls back, removes the directories the kubelet and containerd
// made outside their own (only when they were not there before), and the node's line in
// /etc/hosts when a cluster added it.
func restoreHost(rec hostRecord) error {
	var errs []error
	for k, v := range rec.Sysctls {
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s: %w", k, err))
		}
	}
	if !rec.KubeletDir {
		// The kubelet's device-plugin socket is written there whatever its root directory.
		socks, _ := filepath.Glob("/var/lib/kubelet/device-plugins/*.sock")
		for _, s := range socks {
			os.Remove(s)
		}
		removeEmptyDirs("/var/lib/kubelet")
	}
	if !rec.Containerd {
		removeEmptyDirs("/run/containerd")
	}
	if !rec.HostsLine {
		errs = append(errs, dropHostsLine(NodeName))
	}
	if !rec.HostsLineB {
		errs = append(errs, dropHostsLine(SecondNodeName))
	}
	return errors.Join(errs...)
}

// removeEmptyDirs removes dir and the directories under it, if no file is left in them.
func removeEmptyDirs(dir string) {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		os.Remove(d)
	}
}

// hostsNames says whether /etc/hosts maps name to 127.0.0.1.
func hostsNames(name string) bool {
	b, _ := os.ReadFile("/etc/hosts")
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && f[0] == "127.0.0.1" {
			for _, n := range f[1:] {
				if n == name {
					return true
				}
			}
		}
	}
	return false
}

func dropHostsLine(name string) error {
	b, err := os.ReadFile("/etc/hosts")
	if err != nil {
		return err
	}
	want := "127.0.0.1 " + name + "\n"
	if !bytes.Contains(b, []byte(want)) {
		return nil
	}
	// /etc/hosts may be a bind mount (containers): rewrite it in place, not by rename.
	return os.WriteFile("/etc/hosts", bytes.Replace(b, []byte(want), nil, 1), 0o644)
}

// cgroupHierarchies are the cgroup mounts (v1 controllers, and v2) under /sys/fs/cgroup.
func cgroupHierarchies() []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var roots []string
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 1 || (g[0] != "cgroup" && g[0] != "cgroup2") {
			continue
		}
		if strings.HasPrefix(f[4], "/sys/fs/cgroup") && f[3] == "/" {
			roots = append(roots, f[4])
		}
	}
	return roots
}

// makeCgroupRoot creates the cgroup under which the kubelet puts its pods, in every
// hierarchy (the kubelet wants it to exist): a cluster's pods are in a tree of their own.
func makeCgroupRoot(name string) error {
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			return fmt.Errorf("cgroup %s: %w", dir, err)
		}
		// A v1 cpuset starts empty: give it its parent's CPUs and memory nodes.
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("cgroup %s/%s: %w", dir, f, err)
				}
			}
		}
	}
	return nil
}

// killCgroupTree kills every process in the cgroup tree name, in every hierarchy: the
// containers of the cluster's pods (they outlive the kubelet and containerd otherwise).
func killCgroupTree(name string) {
	for _, h := range cgroupHierarchies() {
		_ = filepath.WalkDir(filepath.Join(h, name), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return nil
		})
	}
}

// removeCgroupTree removes the cgroup tree name (deepest first) in every hierarchy,
// waiting for killed processes to leave it.
func removeCgroupTree(name string, deadline time.Time) error {
	for {
		var left []string
		for _, h := range cgroupHierarchies() {
			var dirs []string
			_ = filepath.WalkDir(filepath.Join(h, name), func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
			for _, d := range dirs {
				if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
					left = append(left, d)
				}
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroups still in use: %s", strings.Join(left, ", "))
		}
		killCgroupTree(name)
		time.Sleep(100 * time.Millisecond)
	}
}

// freeSubnet picks a /24 in 10.234.0.0/16 that no interface on the host is in.
func freeSubnet(seed int) (*net.IPNet, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	for i := range 250 {
		x := (seed+i)%250 + 1
		_, subnet, _ := net.ParseCIDR(fmt.Sprintf("10.234.%d.0/24", x))
		taken := false
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && (subnet.Contains(n.IP) || n.Contains(subnet.IP)) {
				taken = true
			}
		}
		if !taken {
			return subnet, nil
		}
	}
	return nil, fmt.Errorf("no free /24 in 10.234.0.0/16 for the pod network")
}

// deleteLink removes a network interface the bridge plugin made, if it is there.
func deleteLink(name string) error {
	if _, err := net.InterfaceByName(name); err != nil {
		return nil
	}
	if out, err := exec.Command("ip", "link", "delete", name).CombinedOutput(); err != nil {
		return fmt.Errorf("delete link %s: %w: %s", name, err, out)
	}
	return nil
}

// killByCmdline kills the processes whose command line contains marker (the containerd
// shims of this cluster, which name its socket); they were started by this cluster's
// containerd.
func killByCmdline(marker string) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(marker)) && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func goarch() string { return runtime.GOARCH }
