package microvm

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
)

// guestModules are the kernel modules the guest needs and Debian builds as modules: the
// virtio-mmio transport (microvm's devices), the console driver (virtio-serial, the agent's
// channel) and 9p over virtio (the /usr and workspace shares). Their dependencies are found
// in each module's .modinfo.
var guestModules = []string{"virtio_mmio", "virtio_console", "9pnet_virtio", "9p"}

// cpioWriter writes the "newc" cpio format the kernel unpacks as an initramfs.
type cpioWriter struct {
	w   *bufio.Writer
	ino uint32
	n   int64
	err error
}

func newCPIO(w io.Writer) *cpioWriter { return &cpioWriter{w: bufio.NewWriterSize(w, 1<<20), ino: 1} }

func (c *cpioWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	var n int
	n, c.err = c.w.Write(b)
	c.n += int64(n)
}

func (c *cpioWriter) pad() {
	if r := c.n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

// entry writes one header, name and data. mode holds the file type bits (unix S_IF*).
func (c *cpioWriter) entry(name string, mode uint32, rdevMajor, rdevMinor uint32, data []byte) {
	c.ino++
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write(append([]byte(name), 0))
	c.pad()
	c.write(data)
	c.pad()
}

const (
	sIFDIR = 0o040000
	sIFREG = 0o100000
	sIFLNK = 0o120000
	sIFCHR = 0o020000
)

func (c *cpioWriter) dir(name string, perm uint32) { c.entry(name, sIFDIR|perm, 0, 0, nil) }
func (c *cpioWriter) file(name string, perm uint32, data []byte) {
	c.entry(name, sIFREG|perm, 0, 0, data)
}
func (c *cpioWriter) symlink(name, target string) { c.entry(name, sIFLNK|0o777, 0, 0, []byte(target)) }

func (c *cpioWriter) close() error {
	c.entry("TRAILER!!!", 0, 0, 0, nil)
	if c.err != nil {
		return c.err
	}
	return c.w.Flush()
}

// guestUser is the sandbox user as the guest's /etc/passwd names it.
type guestUser struct{ UID, GID uint32 }

// buildInitramfs writes the guest's initramfs to dst: paddock-agent as /init, the kernel
// modules it loads, mount points, a minimal /etc, and /bin, /lib... as symlinks into the
// /usr share (the host's layout, merged /usr).
func buildInitramfs(dst, agentBin, modulesDir string, user guestUser) error {
	mods, err := resolveModules(modulesDir, guestModules)
	if err != nil {
		return err
	}
	initBin, err := os.ReadFile(agentBin)
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	defer f.Close()
	c := newCPIO(f)
	for _, d := range []string{"dev", "proc", "sys", "tmp", "usr", "etc", "run", strings.TrimPrefix(wire.VMWorkspace, "/"), strings.TrimPrefix(wire.VMModulesDir, "/")} {
		c.dir(d, 0o755)
	}
	c.dir("root", 0o700)
	c.entry("dev/console", sIFCHR|0o600, 5, 1, nil)
	c.file("init", 0o755, initBin)
	// The agent also where a container has it, so that the same commands (the welcome
	// app, `paddock-agent secret get`) run in every tier.
	c.dir(path.Dir(strings.TrimPrefix(wire.AgentPath, "/")), 0o755)
	c.symlink(strings.TrimPrefix(wire.AgentPath, "/"), "/init")
	var order []string
	for _, m := range mods {
		data, err := os.ReadFile(m.path)
		if err != nil {
			return fmt.Errorf("initramfs: %w", err)
		}
		c.file(path.Join(strings.TrimPrefix(wire.VMModulesDir, "/"), m.name+".ko"), 0o644, data)
		order = append(order, m.name+".ko")
	}
	c.file(path.Join(strings.TrimPrefix(wire.VMModulesDir, "/"), "order"), 0o644, []byte(strings.Join(order, "\n")+"\n"))
	for _, l := range []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"} {
		if target, err := os.Readlink("/" + l); err == nil && strings.HasPrefix(strings.TrimPrefix(target, "/"), "usr/") {
			c.symlink(l, target)
		}
	}
	writeEtc(c, user)
	if err := c.close(); err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	return f.Close()
}

// writeEtc writes the guest's /etc: users, hosts, and what binaries from the host's /usr
// expect to find there (the loader's cache, /etc/alternatives' links). Nothing else of the
// host's /etc goes in.
func writeEtc(c *cpioWriter, u guestUser) {
	c.file("etc/passwd", 0o644, fmt.Appendf(nil, "root:x:0:0:root:/root:/bin/sh\nsandbox:x:%d:%d:sandbox:/tmp:/bin/sh\n", u.UID, u.GID))
	c.file("etc/group", 0o644, fmt.Appendf(nil, "root:x:0:\nsandbox:x:%d:\n", u.GID))
	c.file("etc/hosts", 0o644, []byte("127.0.0.1\tlocalhost\n::1\tlocalhost\n"))
	for _, name := range []string{"ld.so.cache", "nsswitch.conf", "os-release", "localtime"} {
		if data, err := os.ReadFile("/etc/" + name); err == nil {
			c.file("etc/"+name, 0o644, data)
		}
	}
	alts, _ := os.ReadDir("/etc/alternatives")
	if len(alts) > 0 {
		c.dir("etc/alternatives", 0o755)
	}
	for _, a := range alts {
		if target, err := os.Readlink(filepath.Join("/etc/alternatives", a.Name())); err == nil {
			c.symlink("etc/alternatives/"+a.Name(), target)
		}
	}
}

type module struct{ name, path string }

// resolveModules finds the modules named in want under dir (lib/modules/<version>) and their
// dependencies, dependencies first. Modules built into the kernel are skipped.
func resolveModules(dir string, want []string) ([]module, error) {
	index := map[string]string{}
	err := filepath.WalkDir(filepath.Join(dir, "kernel"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".ko") {
			index[modName(strings.TrimSuffix(d.Name(), ".ko"))] = p
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("guest kernel modules in %s: %w (run scripts/setup.sh): %w", dir, err, errdefs.ErrUnavailable)
	}
	builtin, _ := os.ReadFile(filepath.Join(dir, "modules.builtin"))
	var out []module
	seen := map[string]bool{}
	var visit func(name string) error
	visit = func(name string) error {
		name = modName(name)
		if seen[name] {
			return nil
		}
		seen[name] = true
		p, ok := index[name]
		if !ok {
			if isBuiltin(builtin, name) {
				return nil
			}
			return fmt.Errorf("guest kernel module %s is not in %s: %w", name, dir, errdefs.ErrUnavailable)
		}
		deps, err := moduleDeps(p)
		if err != nil {
			return err
		}
		for _, d := range deps {
			if err := visit(d); err != nil {
				return err
			}
		}
		out = append(out, module{name, p})
		return nil
	}
	for _, w := range want {
		if err := visit(w); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func modName(s string) string { return strings.ReplaceAll(s, "-", "_") }

func isBuiltin(list []byte, name string) bool {
	for _, line := range strings.Split(string(list), "\n") {
		if modName(strings.TrimSuffix(path.Base(line), ".ko")) == name {
			return true
		}
	}
	return false
}

// moduleDeps reads a module's "depends=" from its .modinfo section.
func moduleDeps(p string) ([]string, error) {
	f, err := elf.Open(p)
	if err != nil {
		return nil, fmt.Errorf("kernel module %s: %w", p, err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("kernel module %s has no .modinfo", p)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("kernel module %s: %w", p, err)
	}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok && len(v) > 0 {
			deps := strings.Split(string(v), ",")
			sort.Strings(deps)
			return deps, nil
		}
	}
	return nil, nil
}
