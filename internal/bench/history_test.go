package bench

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestBenchWorkspacePlan checks the workspace without writing it: 10,000 files,
// about 500 MB, at most three directory levels, and the same plan every time.
func TestBenchWorkspacePlan(t *testing.T) {
	p := benchWorkspace.plan()
	if n := p.files(); n != 10000 {
		t.Errorf("%d files, want 10,000", n)
	}
	if b := p.bytes(); b < 450e6 || b > 550e6 {
		t.Errorf("%d bytes, want about 500 MB", b)
	}
	for _, f := range p.Files {
		if depth := strings.Count(f.Path, "/"); depth < 1 || depth > 3 {
			t.Fatalf("%s is %d directories deep, want 1 to 3", f.Path, depth)
		}
	}
	if !reflect.DeepEqual(p, benchWorkspace.plan()) {
		t.Error("two plans of the same spec differ")
	}
	if e := p.editable(123456); !strings.HasPrefix(e, "pkg") || strings.HasSuffix(e, ".bin") {
		t.Errorf("editable(123456) = %q, want a text file", e)
	}
}

// TestGenWriteIsDeterministic writes a small workspace into two directories at once and a
// third alone, and wants the three identical and as planned.
func TestGenWriteIsDeterministic(t *testing.T) {
	spec := genSpec{Text: 60, MinText: 100, MaxText: 3000, Binaries: 3, MinBinary: 4096, MaxBinary: 70000, Links: 8, EmptyDirs: 3, Seed: 9}
	p := spec.plan()
	root := t.TempDir()
	a, b, c := filepath.Join(root, "a"), filepath.Join(root, "b"), filepath.Join(root, "c")
	if err := p.write(a, b); err != nil {
		t.Fatal(err)
	}
	if err := p.write(c); err != nil {
		t.Fatal(err)
	}
	want := snapshot(t, a)
	for _, d := range []string{b, c} {
		if got := snapshot(t, d); !reflect.DeepEqual(got, want) {
			t.Errorf("%s differs from %s", d, a)
		}
	}
	var files, links, empty int
	for _, kind := range want {
		switch {
		case strings.HasPrefix(kind, "file"):
			files++
		case strings.HasPrefix(kind, "link"):
			links++
		case kind == "empty dir":
			empty++
		}
	}
	if files != p.files() || links != spec.Links || empty != spec.EmptyDirs {
		t.Errorf("%d files, %d links, %d empty directories; want %d, %d, %d", files, links, empty, p.files(), spec.Links, spec.EmptyDirs)
	}
	u, err := diskUsage(a)
	if err != nil {
		t.Fatal(err)
	}
	if u.Bytes != p.bytes() || u.Blocks < u.Bytes {
		t.Errorf("usage %+v, want %d bytes and at least as many in blocks", u, p.bytes())
	}
	for _, f := range p.Files {
		if !f.Binary {
			if data := f.content(nil); len(data) != f.Size || data[len(data)-1] != '\n' {
				t.Fatalf("%s: %d bytes ending %q, want %d ending in a newline", f.Path, len(data), data[len(data)-1], f.Size)
			}
		}
	}
}

// snapshot describes every entry under dir: kind, mode, and content hash or link target.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			m[rel] = "link " + target
			return err
		case info.IsDir():
			entries, err := os.ReadDir(p)
			m[rel] = "dir"
			if len(entries) == 0 {
				m[rel] = "empty dir"
			}
			return err
		}
		data, err := os.ReadFile(p)
		m[rel] = fmt.Sprintf("file %v %x", info.Mode(), sha256.Sum256(data))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestGrouped(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 10000: "10,000", 1234567: "1,234,567"} {
		if got := grouped(n); got != want {
			t.Errorf("grouped(%d) = %q, want %q", n, got, want)
		}
	}
}
