package microvm

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// readCPIO parses a newc archive into name → (mode, data), the way the kernel reads it.
func readCPIO(t *testing.T, b []byte) map[string]struct {
	mode uint32
	data string
} {
	t.Helper()
	out := map[string]struct {
		mode uint32
		data string
	}{}
	align := func(n int) int { return (n + 3) &^ 3 }
	for off := 0; ; {
		if off+110 > len(b) || string(b[off:off+6]) != "070701" {
			t.Fatalf("bad header at %d", off)
		}
		field := func(i int) int {
			v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatalf("header field %d at %d: %v", i, off, err)
			}
			return int(v)
		}
		mode, size, nameSize := field(1), field(6), field(11)
		name := string(b[off+110 : off+110+nameSize-1])
		dataOff := align(off + 110 + nameSize)
		if name == "TRAILER!!!" {
			return out
		}
		out[name] = struct {
			mode uint32
			data string
		}{uint32(mode), string(b[dataOff : dataOff+size])}
		off = align(dataOff + size)
	}
}

func TestInitramfs(t *testing.T) {
	in, err := Locate("/usr/local/lib/paddock/guest")
	if err != nil {
		t.Skipf("no guest kernel here to take modules from: %v", err)
	}
	agentBin := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(agentBin, []byte("#!agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "initramfs.cpio")
	if err := buildInitramfs(dst, agentBin, in.Modules, guestUser{1234, 5678}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	files := readCPIO(t, b)
	if f := files["init"]; f.data != "#!agent" || f.mode != sIFREG|0o755 {
		t.Errorf("init: %+v", f)
	}
	if f := files["dev/console"]; f.mode != sIFCHR|0o600 {
		t.Errorf("dev/console: %+v", f)
	}
	if f := files["etc/passwd"]; f.data != "root:x:0:0:root:/root:/bin/sh\nsandbox:x:1234:5678:sandbox:/tmp:/bin/sh\n" {
		t.Errorf("etc/passwd: %q", f.data)
	}
	// Dependencies come before what needs them.
	order := strings.Fields(files["modules/order"].data)
	pos := func(m string) int {
		i := slices.Index(order, m)
		if i < 0 {
			t.Fatalf("module %s not in order %q", m, order)
		}
		return i
	}
	for _, dep := range [][2]string{{"virtio.ko", "virtio_mmio.ko"}, {"9pnet.ko", "9pnet_virtio.ko"}, {"9pnet.ko", "9p.ko"}, {"virtio_ring.ko", "virtio_console.ko"}} {
		if pos(dep[0]) > pos(dep[1]) {
			t.Errorf("%s loads after %s: %q", dep[0], dep[1], order)
		}
	}
}
