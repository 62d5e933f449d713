package files

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/paddockhq/paddock/internal/testenv/xfs"
	"github.com/paddockhq/paddock/internal/wire"
	"github.com/paddockhq/paddock/internal/wire/agentv1"
)

const (
	fileT    = agentv1.FileType_FILE_TYPE_FILE
	dirT     = agentv1.FileType_FILE_TYPE_DIR
	symlinkT = agentv1.FileType_FILE_TYPE_SYMLINK
	otherT   = agentv1.FileType_FILE_TYPE_OTHER
)

func TestStat(t *testing.T) {
	e := newEnv(t)
	e.plant(t, "a.txt", "dir/", "dir/inlink -> ../a.txt", "outdir -> ../outside",
		"abslink -> /etc/passwd", "dangling -> nowhere")
	must(t, os.Chmod(e.host("a.txt"), 0o640))
	must(t, syscall.Mkfifo(e.host("fifo"), 0o600))
	tests := []struct {
		path, wantPath string
		wantType       agentv1.FileType
		wantTarget     string
		wantMode       uint32
	}{
		{"a.txt", "a.txt", fileT, "", 0o640},
		{"/workspace/a.txt", "a.txt", fileT, "", 0o640},
		{"dir", "dir", dirT, "", 0o755},
		{"dir/inlink", "dir/inlink", symlinkT, "../a.txt", 0o777},
		{"outdir", "outdir", symlinkT, "../outside", 0o777},
		{"abslink", "abslink", symlinkT, "/etc/passwd", 0o777},
		{"dangling", "dangling", symlinkT, "nowhere", 0o777},
		{"fifo", "fifo", otherT, "", 0o600},
		{".", ".", dirT, "", 0o755},
		{"/", ".", dirT, "", 0o755},
		{"/workspace", ".", dirT, "", 0o755},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			info, err := e.c.Stat(ctxT(t), &agentv1.StatRequest{Path: tt.path})
			must(t, err)
			if info.Path != tt.wantPath || info.Type != tt.wantType || info.LinkTarget != tt.wantTarget || info.Mode != tt.wantMode {
				t.Fatalf("stat %q = %v, want path %q type %v target %q mode %#o",
					tt.path, info, tt.wantPath, tt.wantType, tt.wantTarget, tt.wantMode)
			}
		})
	}
	t.Run("size and mtime", func(t *testing.T) {
		info, err := e.c.Stat(ctxT(t), &agentv1.StatRequest{Path: "a.txt"})
		must(t, err)
		fi, _ := os.Stat(e.host("a.txt"))
		if info.Size != uint64(fi.Size()) || info.MtimeUnixNano != fi.ModTime().UnixNano() {
			t.Fatalf("size %d mtime %d, want %d %d", info.Size, info.MtimeUnixNano, fi.Size(), fi.ModTime().UnixNano())
		}
	})
	t.Run("missing", func(t *testing.T) {
		_, err := e.c.Stat(ctxT(t), &agentv1.StatRequest{Path: "dir/nope"})
		e.wantCode(t, err, codes.NotFound)
	})
}

func TestList(t *testing.T) {
	e := newEnv(t)
	e.plant(t, "a.txt", "b/c.txt", "b/d/e.txt", "b/d/f/g.txt", "link -> b", "outdir -> ../outside", "b/up -> ..")
	tests := []struct {
		path  string
		depth uint32
		want  []string
	}{
		{".", 0, []string{"a.txt", "b", "link", "outdir"}},
		{".", 1, []string{"a.txt", "b", "link", "outdir"}},
		{".", 2, []string{"a.txt", "b", "b/c.txt", "b/d", "b/up", "link", "outdir"}},
		{".", 3, []string{"a.txt", "b", "b/c.txt", "b/d", "b/d/e.txt", "b/d/f", "b/up", "link", "outdir"}},
		{"/", 100, []string{"a.txt", "b", "b/c.txt", "b/d", "b/d/e.txt", "b/d/f", "b/d/f/g.txt", "b/up", "link", "outdir"}},
		{"b", 1, []string{"b/c.txt", "b/d", "b/up"}},
		{"/workspace/b/d", 0, []string{"b/d/e.txt", "b/d/f"}},
		{"b/d/f", 9, []string{"b/d/f/g.txt"}},
		{"link", 1, []string{"link/c.txt", "link/d", "link/up"}},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			resp, err := e.c.List(ctxT(t), &agentv1.ListFilesRequest{Path: tt.path, Depth: tt.depth})
			must(t, err)
			var got []string
			for _, ent := range resp.Entries {
				got = append(got, ent.Path)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("list %q depth %d = %v, want %v", tt.path, tt.depth, got, tt.want)
			}
		})
	}
	t.Run("symlinks are reported, not followed", func(t *testing.T) {
		resp, err := e.c.List(ctxT(t), &agentv1.ListFilesRequest{Path: ".", Depth: 2})
		must(t, err)
		targets := map[string]string{"link": "b", "outdir": "../outside", "b/up": ".."}
		for _, ent := range resp.Entries {
			if want, ok := targets[ent.Path]; ok && (ent.Type != symlinkT || ent.LinkTarget != want) {
				t.Errorf("%s: type %v target %q, want a symlink to %q", ent.Path, ent.Type, ent.LinkTarget, want)
			}
		}
	})
	for _, tt := range []struct {
		name, path string
		want       codes.Code
	}{
		{"a file", "a.txt", codes.InvalidArgument},
		{"missing", "nope", codes.NotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.c.List(ctxT(t), &agentv1.ListFilesRequest{Path: tt.path})
			e.wantCode(t, err, tt.want)
		})
	}
}

func TestListCap(t *testing.T) {
	e := newEnv(t, func(s *Service) { s.maxList = 5 })
	e.plant(t, "1", "2", "3", "d/4", "d/5", "d/6")
	tests := []struct {
		path  string
		depth uint32
		want  codes.Code
	}{
		{".", 1, codes.OK},                // 1 2 3 d
		{"d", 1, codes.OK},                // d/4 d/5 d/6
		{".", 2, codes.ResourceExhausted}, // 7 entries
	}
	for _, tt := range tests {
		_, err := e.c.List(ctxT(t), &agentv1.ListFilesRequest{Path: tt.path, Depth: tt.depth})
		e.wantCode(t, err, tt.want)
	}
}

func TestMkdir(t *testing.T) {
	e := newEnv(t)
	e.plant(t, "dir/", "a.txt")
	old := syscall.Umask(0o077) // a strict umask must not cut the requested mode
	defer syscall.Umask(old)
	tests := []struct {
		name     string
		req      *agentv1.MkdirRequest
		want     codes.Code
		wantMode os.FileMode
	}{
		{"new", &agentv1.MkdirRequest{Path: "n1"}, codes.OK, 0o755 | os.ModeDir},
		{"mode despite umask", &agentv1.MkdirRequest{Path: "n2", Mode: 0o775}, codes.OK, 0o775 | os.ModeDir},
		{"setgid refused", &agentv1.MkdirRequest{Path: "n3", Mode: 0o2770}, codes.InvalidArgument, 0},
		{"sticky", &agentv1.MkdirRequest{Path: "n3", Mode: 0o1770}, codes.OK, 0o770 | os.ModeDir | os.ModeSticky},
		{"parents", &agentv1.MkdirRequest{Path: "p/q/r", Parents: true, Mode: 0o700}, codes.OK, 0o700 | os.ModeDir},
		{"exists", &agentv1.MkdirRequest{Path: "dir"}, codes.AlreadyExists, 0},
		{"exists with parents", &agentv1.MkdirRequest{Path: "dir", Parents: true}, codes.OK, 0o755 | os.ModeDir},
		{"workspace", &agentv1.MkdirRequest{Path: "/"}, codes.AlreadyExists, 0},
		{"file in the way", &agentv1.MkdirRequest{Path: "a.txt"}, codes.AlreadyExists, 0},
		{"file in the way with parents", &agentv1.MkdirRequest{Path: "a.txt", Parents: true}, codes.AlreadyExists, 0},
		{"missing parent", &agentv1.MkdirRequest{Path: "x/y"}, codes.NotFound, 0},
		{"under a file", &agentv1.MkdirRequest{Path: "a.txt/x"}, codes.FailedPrecondition, 0},
		{"bad mode", &agentv1.MkdirRequest{Path: "n4", Mode: 0o40755}, codes.InvalidArgument, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info, err := e.c.Mkdir(ctxT(t), &agentv1.MkdirRequest{Path: tt.req.Path, Parents: tt.req.Parents, Mode: tt.req.Mode})
			e.wantCode(t, err, tt.want)
			if err != nil {
				return
			}
			fi, err := os.Lstat(e.host(info.Path))
			must(t, err)
			if info.Type != dirT || fi.Mode() != tt.wantMode || info.Mode != wireMode(tt.wantMode) {
				t.Fatalf("made %v, mode on disk %v; want a dir of mode %v", info, fi.Mode(), tt.wantMode)
			}
		})
	}
}

func TestMove(t *testing.T) {
	tests := []struct {
		name     string
		req      *agentv1.MoveRequest
		want     codes.Code
		wantGone string            // must no longer exist, on success
		wantData map[string]string // host files that must hold this content afterwards
	}{
		{"rename a file", &agentv1.MoveRequest{From: "a.txt", To: "z.txt"}, codes.OK, "a.txt",
			map[string]string{"z.txt": "content of a.txt"}},
		{"into a directory", &agentv1.MoveRequest{From: "/a.txt", To: "/workspace/dir/a.txt"}, codes.OK, "a.txt",
			map[string]string{"dir/a.txt": "content of a.txt"}},
		{"a directory", &agentv1.MoveRequest{From: "dir", To: "dir2"}, codes.OK, "dir",
			map[string]string{"dir2/keep": "content of dir/keep"}},
		{"target exists", &agentv1.MoveRequest{From: "a.txt", To: "b.txt"}, codes.AlreadyExists, "",
			map[string]string{"a.txt": "content of a.txt", "b.txt": "content of b.txt"}},
		{"target is a dangling symlink", &agentv1.MoveRequest{From: "a.txt", To: "dangling"}, codes.AlreadyExists, "",
			map[string]string{"a.txt": "content of a.txt"}},
		{"overwrite", &agentv1.MoveRequest{From: "a.txt", To: "b.txt", Overwrite: true}, codes.OK, "a.txt",
			map[string]string{"b.txt": "content of a.txt"}},
		{"missing source", &agentv1.MoveRequest{From: "nope", To: "x"}, codes.NotFound, "", nil},
		{"missing target dir", &agentv1.MoveRequest{From: "a.txt", To: "nope/a.txt"}, codes.NotFound, "",
			map[string]string{"a.txt": "content of a.txt"}},
		{"the workspace", &agentv1.MoveRequest{From: "/", To: "x"}, codes.InvalidArgument, "", nil},
		{"onto the workspace", &agentv1.MoveRequest{From: "a.txt", To: "/workspace", Overwrite: true}, codes.InvalidArgument, "",
			map[string]string{"a.txt": "content of a.txt"}},
		{"onto a non-empty dir", &agentv1.MoveRequest{From: "empty", To: "dir", Overwrite: true}, codes.FailedPrecondition, "",
			map[string]string{"dir/keep": "content of dir/keep"}},
		{"a dir into itself", &agentv1.MoveRequest{From: "dir", To: "dir/sub"}, codes.InvalidArgument, "",
			map[string]string{"dir/keep": "content of dir/keep"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.plant(t, "a.txt", "b.txt", "dir/keep", "empty/", "dangling -> nowhere")
			info, err := e.c.Move(ctxT(t), tt.req)
			e.wantCode(t, err, tt.want)
			if err == nil && info.Path != mustResolve(t, tt.req.To) {
				t.Errorf("moved to %q, want %q", info.Path, tt.req.To)
			}
			if _, err := os.Lstat(e.host(tt.wantGone)); tt.wantGone != "" && !os.IsNotExist(err) {
				t.Errorf("%s still there: %v", tt.wantGone, err)
			}
			for rel, want := range tt.wantData {
				if got := e.hostRead(t, rel); got != want {
					t.Errorf("%s = %q, want %q", rel, got, want)
				}
			}
		})
	}
}

// TestMoveOnXFS: a move onto a directory that is not empty fails as it does on ext4 where
// the workspace is on XFS, whose rename says EEXIST for it (ext4's says ENOTEMPTY); without
// overwrite, the target's existence is the error.
func TestMoveOnXFS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a file system needs root (CI runs as root)")
	}
	dir, err := os.MkdirTemp("", "files-xfs")
	must(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	root := filepath.Join(dir, "xfs")
	must(t, xfs.Mount(t.Context(), filepath.Join(dir, "xfs.img"), root, 512<<20))
	t.Cleanup(func() { _ = syscall.Unmount(root, syscall.MNT_DETACH) })
	// newEnv's first TempDir is the test's, made under TMPDIR: on the XFS.
	t.Setenv("TMPDIR", root)
	e := newEnv(t)
	if !strings.HasPrefix(e.ws, root) {
		t.Fatalf("the workspace %s is not on the XFS at %s", e.ws, root)
	}
	e.plant(t, "dir/keep", "empty/")
	_, err = e.c.Move(ctxT(t), &agentv1.MoveRequest{From: "empty", To: "dir", Overwrite: true})
	e.wantCode(t, err, codes.FailedPrecondition)
	if err == nil || !strings.Contains(err.Error(), "directory not empty") {
		t.Errorf("move onto a non-empty directory: %v, want it to say so", err)
	}
	_, err = e.c.Move(ctxT(t), &agentv1.MoveRequest{From: "empty", To: "dir"})
	e.wantCode(t, err, codes.AlreadyExists)
	if _, err := os.Stat(e.host("dir/keep")); err != nil {
		t.Errorf("the target's file after the failed moves: %v", err)
	}
}

func mustResolve(t *testing.T, p string) string {
	rel, err := wire.ResolvePath(p)
	must(t, err)
	return rel
}

func TestRemove(t *testing.T) {
	tests := []struct {
		name     string
		req      *agentv1.RemoveRequest
		want     codes.Code
		wantGone string
		wantKept []string
	}{
		{"a file", &agentv1.RemoveRequest{Path: "a.txt"}, codes.OK, "a.txt", []string{"dir/keep"}},
		{"an empty dir", &agentv1.RemoveRequest{Path: "empty"}, codes.OK, "empty", nil},
		{"a non-empty dir", &agentv1.RemoveRequest{Path: "dir"}, codes.FailedPrecondition, "", []string{"dir/keep"}},
		{"a non-empty dir, recursive", &agentv1.RemoveRequest{Path: "/workspace/dir", Recursive: true}, codes.OK, "dir", []string{"a.txt"}},
		{"a symlink to a dir", &agentv1.RemoveRequest{Path: "link", Recursive: true}, codes.OK, "link", []string{"dir/keep"}},
		{"missing", &agentv1.RemoveRequest{Path: "nope"}, codes.NotFound, "", nil},
		{"missing, recursive", &agentv1.RemoveRequest{Path: "nope", Recursive: true}, codes.NotFound, "", nil},
		{"the workspace", &agentv1.RemoveRequest{Path: ".", Recursive: true}, codes.InvalidArgument, "", []string{"a.txt"}},
		{"the workspace as /", &agentv1.RemoveRequest{Path: "/", Recursive: true}, codes.InvalidArgument, "", []string{"a.txt"}},
		{"the workspace as /workspace/", &agentv1.RemoveRequest{Path: "/workspace/", Recursive: true}, codes.InvalidArgument, "", []string{"a.txt"}},
		{"the workspace as dir/..", &agentv1.RemoveRequest{Path: "dir/..", Recursive: true}, codes.InvalidArgument, "", []string{"a.txt"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.plant(t, "a.txt", "dir/keep", "empty/", "link -> dir")
			_, err := e.c.Remove(ctxT(t), tt.req)
			e.wantCode(t, err, tt.want)
			if _, err := os.Lstat(e.host(tt.wantGone)); tt.wantGone != "" && !os.IsNotExist(err) {
				t.Errorf("%s still there: %v", tt.wantGone, err)
			}
			for _, rel := range tt.wantKept {
				if _, err := os.Lstat(e.host(rel)); err != nil {
					t.Errorf("%s was removed: %v", rel, err)
				}
			}
		})
	}
}
