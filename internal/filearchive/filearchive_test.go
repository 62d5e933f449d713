package filearchive_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
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
	tw.Close()
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
	f.Fuzz(func(t *testing.T, data []byte) {
		outer := t.TempDir()
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
