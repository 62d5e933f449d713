package files

import (
	"context"
	"os"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/paddockhq/paddock/internal/wire/agentv1"
)

// escapeEnv plants the symlinks hostile code would use to reach outside the workspace.
func escapeEnv(t *testing.T) *env {
	e := newEnv(t)
	e.plant(t,
		"a.txt",
		"dir/",
		"outdir -> ../outside", // a directory outside, relative target
		"outfile -> ../outside/sentinel",
		"abslink -> "+e.sentinel,  // absolute target
		"absdir -> "+e.outside,    // absolute target, a directory
		"dir/up -> ../../outside", // deeper, climbing out
		"loop -> loop",
	)
	return e
}

func TestEscapesAreRefused(t *testing.T) {
	e := escapeEnv(t)
	c := e.c
	type call func(ctx context.Context) error
	read := func(p string) call {
		return func(ctx context.Context) error { _, _, err := e.get(ctx, &agentv1.ReadRequest{Path: p}); return err }
	}
	write := func(p string) call {
		return func(ctx context.Context) error {
			_, err := e.put(ctx, &agentv1.WriteRequest{Path: p, MakeParents: true}, []byte("pwned"), 2)
			return err
		}
	}
	mkdir := func(p string) call {
		return func(ctx context.Context) error {
			_, err := c.Mkdir(ctx, &agentv1.MkdirRequest{Path: p, Parents: true})
			return err
		}
	}
	move := func(from, to string) call {
		return func(ctx context.Context) error {
			_, err := c.Move(ctx, &agentv1.MoveRequest{From: from, To: to, Overwrite: true})
			return err
		}
	}
	remove := func(p string) call {
		return func(ctx context.Context) error {
			_, err := c.Remove(ctx, &agentv1.RemoveRequest{Path: p, Recursive: true})
			return err
		}
	}
	stat := func(p string) call {
		return func(ctx context.Context) error { _, err := c.Stat(ctx, &agentv1.StatRequest{Path: p}); return err }
	}
	list := func(p string) call {
		return func(ctx context.Context) error {
			_, err := c.List(ctx, &agentv1.ListFilesRequest{Path: p, Depth: 3})
			return err
		}
	}
	watch := func(p string) call {
		return func(ctx context.Context) error {
			stream, err := c.Watch(ctx, &agentv1.WatchRequest{Path: p, Recursive: true})
			if err != nil {
				return err
			}
			_, err = stream.Recv()
			return err
		}
	}
	const invalid, denied = codes.InvalidArgument, codes.PermissionDenied
	tests := []struct {
		name string
		call call
		want codes.Code
	}{
		{"read ../x", read("../x"), invalid},
		{"read /../../etc/passwd", read("/../../etc/passwd"), invalid},
		{"read a/../../x", read("a/../../x"), invalid},
		{"read /workspace/../outside/sentinel", read("/workspace/../outside/sentinel"), invalid},
		{"read a NUL byte path", read("a.txt\x00/../../outside/sentinel"), invalid},
		{"read through a dir symlink", read("outdir/sentinel"), denied},
		{"read through a deeper dir symlink", read("dir/up/sentinel"), denied},
		{"read through an absolute dir symlink", read("absdir/sentinel"), denied},
		{"read a file symlink", read("outfile"), denied},
		{"read an absolute file symlink", read("abslink"), denied},
		{"read a symlink loop", read("loop"), invalid},
		{"write ../x", write("../x"), invalid},
		{"write through a dir symlink", write("outdir/sentinel"), denied},
		{"write a new file through a dir symlink", write("outdir/new"), denied},
		{"write through an absolute dir symlink", write("absdir/new"), denied},
		{"write with parents through a symlink", write("dir/up/sub/new"), denied},
		{"write a NUL byte path", write("x\x00y"), invalid},
		{"mkdir ../x", mkdir("../x"), invalid},
		{"mkdir through a dir symlink", mkdir("outdir/new"), denied},
		{"mkdir deep through a dir symlink", mkdir("dir/up/new/deeper"), denied},
		{"move into a dir symlink", move("a.txt", "outdir/a.txt"), denied},
		{"move out of a dir symlink", move("outdir/sentinel", "stolen"), denied},
		{"move ../", move("../outside/sentinel", "stolen"), invalid},
		{"move to ../", move("a.txt", "../outside/sentinel"), invalid},
		{"remove through a dir symlink", remove("outdir/sentinel"), denied},
		{"remove through an absolute dir symlink", remove("absdir/sentinel"), denied},
		{"remove ../", remove("../outside"), invalid},
		{"stat through a dir symlink", stat("outdir/sentinel"), denied},
		{"stat ../", stat("/../outside/sentinel"), invalid},
		{"list a dir symlink", list("outdir"), denied},
		{"list an absolute dir symlink", list("absdir"), denied},
		{"list ../", list(".."), invalid},
		{"watch a dir symlink", watch("outdir"), denied},
		{"watch a file symlink", watch("outfile"), denied},
		{"watch ../", watch("../outside"), invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.wantCode(t, tt.call(ctxT(t)), tt.want)
			e.checkOutside(t)
			if got := e.hostRead(t, "a.txt"); got != "content of a.txt" {
				t.Fatalf("a.txt changed: %q", got)
			}
		})
	}
}

// TestSymlinksAreNotWrittenThrough covers calls that succeed on a symlink pointing out:
// they act on the link itself and never on what it points to.
func TestSymlinksAreNotWrittenThrough(t *testing.T) {
	t.Run("write replaces a file symlink", func(t *testing.T) {
		e := escapeEnv(t)
		_, err := e.put(ctxT(t), &agentv1.WriteRequest{Path: "outfile"}, []byte("new"), 2)
		must(t, err)
		e.checkOutside(t)
		if fi, err := os.Lstat(e.host("outfile")); err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("outfile is not a regular file now: %v %v", fi, err)
		}
	})
	t.Run("remove deletes the link, not the target", func(t *testing.T) {
		e := escapeEnv(t)
		_, err := e.c.Remove(ctxT(t), &agentv1.RemoveRequest{Path: "outdir", Recursive: true})
		must(t, err)
		_, err = e.c.Remove(ctxT(t), &agentv1.RemoveRequest{Path: "abslink"})
		must(t, err)
		e.checkOutside(t)
		if _, err := os.Lstat(e.host("outdir")); !os.IsNotExist(err) {
			t.Fatalf("outdir still there: %v", err)
		}
	})
	t.Run("recursive remove does not descend symlinks", func(t *testing.T) {
		e := escapeEnv(t)
		_, err := e.c.Remove(ctxT(t), &agentv1.RemoveRequest{Path: "dir", Recursive: true})
		must(t, err)
		e.checkOutside(t)
	})
	t.Run("move renames the link", func(t *testing.T) {
		e := escapeEnv(t)
		info, err := e.c.Move(ctxT(t), &agentv1.MoveRequest{From: "outdir", To: "dir/moved"})
		must(t, err)
		if info.Type != agentv1.FileType_FILE_TYPE_SYMLINK || info.LinkTarget != "../outside" {
			t.Fatalf("moved link reported as %v", info)
		}
		e.checkOutside(t)
	})
}
