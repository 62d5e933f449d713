package filearchive_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/filearchive"
)

func open(t *testing.T, dir string) *filearchive.Local {
	t.Helper()
	l, err := filearchive.OpenLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// A tree written as a tar and extracted elsewhere comes back the same: contents, modes,
// empty directories and a symlink inside it.
func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(src, "proj", "sub", "empty"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "proj", "a.txt"), []byte("alpha"), 0o644))
	must(t, os.WriteFile(filepath.Join(src, "proj", "sub", "run.sh"), []byte("#!/bin/sh\n"), 0o755))
	must(t, os.Symlink("sub/run.sh", filepath.Join(src, "proj", "link")))

	s := open(t, src)
	entries, err := filearchive.Walk(ctx, s, "proj", "copy")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := filearchive.Write(ctx, &buf, s, entries); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	res, err := filearchive.Extract(ctx, &buf, open(t, dst), ".")
	if err != nil {
		t.Fatal(err)
	}
	if res.Files != 2 || res.Dirs != 3 || res.Bytes != 15 || len(res.Skipped) != 0 {
		t.Errorf("result %+v, want 2 files of 15 bytes, 3 directories", res)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "copy", "a.txt")); string(b) != "alpha" {
		t.Errorf("a.txt: %q", b)
	}
	if fi, err := os.Stat(filepath.Join(dst, "copy", "sub", "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("run.sh: %v %v, want mode 755", fi, err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "copy", "sub", "empty")); err != nil || !fi.IsDir() {
		t.Errorf("empty directory: %v", err)
	}
	if l, err := os.Readlink(filepath.Join(dst, "copy", "link")); l != "sub/run.sh" {
		t.Errorf("link: %q %v", l, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func archive(t testing.TB, hdrs ...*tar.Header) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	if _, ok := t.(*testing.F); ok {
		tw.Flush() // no end blocks: the fuzzer's seeds stay small, and a missing end is EOF
	} else {
		tw.Close()
	}
	return buf.Bytes()
}

// Hostile entries are refused with an error naming the entry and why, and nothing is
// made outside the directory extracted into.
func TestHostile(t *testing.T) {
	for _, tc := range []struct {
		name string
		hdr  *tar.Header
		want string
	}{
		{"dotdot", &tar.Header{Name: "a/../../evil", Typeflag: tar.TypeReg, Size: 1}, `"a/../../evil": ".." leads outside`},
		{"absolute", &tar.Header{Name: "/etc/passwd", Typeflag: tar.TypeReg, Size: 1}, `"/etc/passwd": absolute path`},
		{"symlink up", &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../../../etc"}, `"l": symlink to "../../../etc" escapes the workspace`},
		{"symlink absolute", &tar.Header{Name: "d/l", Typeflag: tar.TypeSymlink, Linkname: "/etc/shadow"}, `"d/l": symlink to "/etc/shadow": an absolute target escapes`},
		{"char device", &tar.Header{Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}, `"null": device files are refused`},
		{"block device", &tar.Header{Name: "sda", Typeflag: tar.TypeBlock}, `"sda": device files are refused`},
		{"fifo", &tar.Header{Name: "p", Typeflag: tar.TypeFifo}, `"p": named pipes are refused`},
		{"hard link", &tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}, `"h": hard links are not supported`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outer := t.TempDir()
			dst := filepath.Join(outer, "in", "dst")
			must(t, os.MkdirAll(dst, 0o755))
			data := archive(t, &tar.Header{Name: "ok.txt", Typeflag: tar.TypeReg, Size: 2, Mode: 0o644}, tc.hdr)
			res, err := filearchive.Extract(context.Background(), bytes.NewReader(data), open(t, dst), "in/dst")
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want invalid argument with %q", err, tc.want)
			}
			if res.Files != 1 {
				t.Errorf("entries before the bad one: %+v", res)
			}
			ents, _ := os.ReadDir(outer)
			if len(ents) != 1 {
				t.Errorf("something was made outside: %v", ents)
			}
		})
	}
}

// A symlink may point anywhere inside the workspace, also above the directory
// extracted into.
func TestSymlinkInsideWorkspace(t *testing.T) {
	hdr := &tar.Header{Name: "d/l", Typeflag: tar.TypeSymlink, Linkname: "../../shared"}
	if _, err := filearchive.Check(hdr, "proj/x"); err != nil {
		t.Errorf("a link to proj/shared from proj/x/d: %v", err)
	}
	if _, err := filearchive.Check(hdr, "."); err == nil {
		t.Errorf("a link above the workspace from d was accepted")
	}
}

// A truncated archive is an error, not a short tree.
func TestTruncated(t *testing.T) {
	data := archive(t, &tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: 4096, Mode: 0o644})
	_, err := filearchive.Extract(context.Background(), bytes.NewReader(data[:1024]), open(t, t.TempDir()), ".")
	if !errors.Is(err, errdefs.ErrInvalidArgument) && !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("truncated: %v", err)
	}
	if err == nil {
		t.Fatal("truncated archive accepted")
	}
}

// FuzzExtract: no archive makes Extract panic or write outside its directory.
func FuzzExtract(f *testing.F) {
	f.Add(archive(f, &tar.Header{Name: "a/b.txt", Typeflag: tar.TypeReg, Size: 3, Mode: 0o644}))
	f.Add(archive(f, &tar.Header{Name: "../x", Typeflag: tar.TypeReg, Size: 1}))
	f.Add(archive(f, &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../.."}, &tar.Header{Name: "l/x", Typeflag: tar.TypeReg, Size: 1}))
	f.Add(archive(f, &tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o4777}))
	base := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		outer, err := os.MkdirTemp(base, "x")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(outer)
		dst := filepath.Join(outer, "dst")
		if err := os.Mkdir(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		l, err := filearchive.OpenLocal(dst)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		filearchive.Extract(context.Background(), bytes.NewReader(data), l, ".")
		if ents, _ := os.ReadDir(outer); len(ents) != 1 {
			t.Fatalf("something was made outside: %v", ents)
		}
		filepath.WalkDir(dst, func(p string, d os.DirEntry, err error) error {
			if err == nil {
				if fi, _ := d.Info(); fi != nil && fi.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeDevice|os.ModeNamedPipe) != 0 {
					t.Errorf("%s: mode %v", p, fi.Mode())
				}
			}
			return nil
		})
	})
}

// FuzzCheck: every entry Check accepts from any archive is a clean relative name inside
// the directory, of a type Extract makes, and a symlink's target stays in the workspace.
func FuzzCheck(f *testing.F) {
	f.Add(archive(f, &tar.Header{Name: "./a/b.txt", Typeflag: tar.TypeReg, Size: 3, Mode: 0o644}), "x")
	f.Add(archive(f, &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../y"}), "x/y")
	f.Add(archive(f, &tar.Header{Name: "a/../../b", Typeflag: tar.TypeDir}), ".")
	f.Fuzz(func(t *testing.T, data []byte, base string) {
		base = path.Clean(base)
		if strings.HasPrefix(base, "/") || base == ".." || strings.HasPrefix(base, "../") {
			return // the server resolves the base in the workspace first
		}
		tr := tar.NewReader(bytes.NewReader(data))
		for {
			hdr, err := tr.Next()
			if err != nil {
				return
			}
			e, err := filearchive.Check(hdr, base)
			if err != nil {
				continue
			}
			if e.Type == 0 {
				continue
			}
			if e.Name == "." || path.IsAbs(e.Name) || path.Clean(e.Name) != e.Name || strings.HasPrefix(e.Name, "../") || e.Name == ".." {
				t.Fatalf("accepted name %q from %q", e.Name, hdr.Name)
			}
			if e.Mode&^fs.ModePerm != 0 {
				t.Fatalf("mode %v kept more than permission bits", e.Mode)
			}
			if e.Type == filearchive.Symlink {
				at := path.Join(base, path.Dir(e.Name), e.Link)
				if path.IsAbs(e.Link) || at == ".." || strings.HasPrefix(at, "../") {
					t.Fatalf("symlink %q -> %q at %q leaves the workspace", e.Name, e.Link, base)
				}
			}
		}
	})
}

// A sparse file, whose holes the archive does not carry, is refused: a few bytes would
// stand for any number of zeros.
func TestSparseRefused(t *testing.T) {
	var records string
	for _, kv := range []string{"GNU.sparse.major=1", "GNU.sparse.minor=0", "GNU.sparse.name=s", "GNU.sparse.realsize=1099511627776"} {
		n := len(kv) + 4 // "NN " and "\n", for records under 100 bytes
		records += fmt.Sprintf("%d %s\n", n, kv)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	must(t, tw.WriteHeader(&tar.Header{Name: "pax", Typeflag: tar.TypeReg, Size: int64(len(records)), Format: tar.FormatUSTAR}))
	io.WriteString(tw, records)
	must(t, tw.WriteHeader(&tar.Header{Name: "s", Typeflag: tar.TypeReg, Size: 512 + 1, Format: tar.FormatUSTAR}))
	tw.Write(append(append([]byte("1\n0\n1\n"), make([]byte, 506)...), 'x'))
	tw.Close()
	// The first header becomes a PAX extended header: its type, then its checksum.
	data := buf.Bytes()
	data[156] = tar.TypeXHeader
	copy(data[148:156], "        ")
	var sum int
	for _, b := range data[:512] {
		sum += int(b)
	}
	copy(data[148:156], fmt.Sprintf("%06o\x00 ", sum))

	_, err := filearchive.Extract(context.Background(), bytes.NewReader(data), open(t, t.TempDir()), ".")
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `"s": sparse files are not supported`) {
		t.Errorf("sparse file: %v", err)
	}
}
