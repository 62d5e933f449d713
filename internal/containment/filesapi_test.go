package containment

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// plantLinks is what a hostile command leaves in the workspace for the host's file API to
// trip over: symlinks out of it (absolute and relative, to directories and to a file), a
// FIFO, and a file outside (/tmp/victim) that the agent itself could reach.
const plantLinks = `set -e
ln -s /etc /workspace/etc_link
ln -s / /workspace/root_link
ln -s /tmp /workspace/tmp_link
ln -s ../../../../../.. /workspace/up_link
ln -s /etc/hostname /workspace/hostname_link
mkfifo /workspace/fifo
echo inside > /workspace/ok.txt
mkdir /workspace/sub
echo victim > /tmp/victim`

// TestFilesAPI: the agent's file API, which the trusted host drives, cannot be led out of
// the workspace by symlinks the sandbox plants or by ".." in the host's paths: no read,
// stat, list, write, mkdir, move, remove or watch reaches what the links point at, while
// the same operations work on the workspace's own files.
func TestFilesAPI(t *testing.T) {
	h := newHarness(t)
	b := h.newBox(t, boxOpts{defaultWorkspace: true})
	b.mustExec(t, plantLinks)
	fc := b.sb.Agent().Files()

	t.Run("controls", func(t *testing.T) {
		if got, err := readFile(fc, "ok.txt"); err != nil || got != "inside\n" {
			t.Errorf("CONTROL FAILED: read ok.txt: %q, %v", got, err)
		}
		if got, err := readFile(fc, "/workspace/ok.txt"); err != nil || got != "inside\n" {
			t.Errorf("CONTROL FAILED: read /workspace/ok.txt: %q, %v", got, err)
		}
		if got := b.mustExec(t, "cat /etc/hostname /tmp/victim"); got != "sandbox\nvictim\n" {
			t.Errorf("CONTROL FAILED: the link targets should exist in the sandbox: %q", got)
		}
		if _, err := writeFile(fc, "new.txt", "hello"); err != nil {
			t.Errorf("CONTROL FAILED: write new.txt: %v", err)
		} else if got := b.mustExec(t, "cat /workspace/new.txt"); got != "hello" {
			t.Errorf("CONTROL FAILED: new.txt in the sandbox holds %q", got)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ls, err := fc.List(ctx, &pb.ListFilesRequest{Path: "."})
		if err != nil {
			t.Fatalf("CONTROL FAILED: list the workspace: %v", err)
		}
		var link *pb.FileInfo
		for _, e := range ls.GetEntries() {
			if e.GetPath() == "etc_link" {
				link = e
			}
		}
		if link.GetType() != pb.FileType_FILE_TYPE_SYMLINK || link.GetLinkTarget() != "/etc" {
			t.Errorf("CONTROL FAILED: want etc_link listed as a symlink to /etc, got %v", link)
		}
	})

	outside := []string{"etc_link/hostname", "root_link/etc/hostname", "root_link/.paddock/paddock-agent", "up_link/etc/hostname", "hostname_link", "tmp_link/victim"}
	lexical := []string{"../etc/hostname", "/workspace/../etc/hostname", "sub/../../etc/hostname", "/../../../etc/hostname"}
	for _, p := range outside {
		t.Run("read "+p, func(t *testing.T) {
			got, err := readFile(fc, p)
			refused(t, err, "read "+p+" gave "+clip(got))
		})
		t.Run("stat "+p, func(t *testing.T) {
			fi, err := fc.Stat(context.Background(), &pb.StatRequest{Path: p})
			if err == nil && fi.GetType() == pb.FileType_FILE_TYPE_SYMLINK && !strings.Contains(p, "/") {
				return // the link itself, reported as a link and not followed: in the workspace
			}
			refused(t, err, "stat "+p+" gave "+fi.String())
		})
	}
	for _, p := range lexical {
		t.Run("read "+p, func(t *testing.T) {
			got, err := readFile(fc, p)
			refused(t, err, "read "+p+" gave "+clip(got), codes.InvalidArgument)
		})
	}
	t.Run("read a planted FIFO", func(t *testing.T) {
		start := time.Now()
		_, err := readFile(fc, "fifo")
		refused(t, err, "read fifo")
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("reading a FIFO held the agent for %s", d)
		}
	})
	for _, p := range []string{"etc_link", "root_link", "tmp_link", "up_link"} {
		t.Run("list "+p, func(t *testing.T) {
			ls, err := fc.List(context.Background(), &pb.ListFilesRequest{Path: p})
			refused(t, err, "list "+p+" gave "+entryNames(ls))
		})
	}
	t.Run("list the workspace deep", func(t *testing.T) {
		ls, err := fc.List(context.Background(), &pb.ListFilesRequest{Path: ".", Depth: 8})
		if err != nil {
			t.Fatalf("CONTROL FAILED: %v", err)
		}
		for _, e := range ls.GetEntries() {
			if strings.Contains(e.GetPath(), "_link/") {
				t.Errorf("ESCAPE: listing the workspace descended into a symlink: %s", e.GetPath())
			}
		}
	})

	for _, p := range []string{"etc_link/evil", "tmp_link/evil", "root_link/tmp/evil", "up_link/tmp/evil", "tmp_link/newdir/evil"} {
		t.Run("write "+p, func(t *testing.T) {
			_, err := writeFile(fc, p, "escaped")
			refused(t, err, "write "+p)
		})
	}
	t.Run("write over hostname_link", func(t *testing.T) {
		// Writing at a symlink's own path replaces the link; it must not write through it.
		_, _ = writeFile(fc, "hostname_link", "escaped")
		if got := b.mustExec(t, "cat /etc/hostname"); strings.Contains(got, "escaped") {
			t.Errorf("ESCAPE: a write to hostname_link went through the link to /etc/hostname")
		}
	})
	for _, p := range []string{"../x", "/workspace/../x", "sub/../../x"} {
		t.Run("write "+p, func(t *testing.T) {
			_, err := writeFile(fc, p, "escaped")
			refused(t, err, "write "+p, codes.InvalidArgument)
		})
	}
	t.Run("mkdir tmp_link/d", func(t *testing.T) {
		_, err := fc.Mkdir(context.Background(), &pb.MkdirRequest{Path: "tmp_link/d", Parents: true})
		refused(t, err, "mkdir tmp_link/d")
	})
	t.Run("move ok.txt out through tmp_link", func(t *testing.T) {
		_, err := fc.Move(context.Background(), &pb.MoveRequest{From: "ok.txt", To: "tmp_link/moved"})
		refused(t, err, "move to tmp_link/moved")
	})
	t.Run("move /tmp/victim in through tmp_link", func(t *testing.T) {
		_, err := fc.Move(context.Background(), &pb.MoveRequest{From: "tmp_link/victim", To: "stolen"})
		refused(t, err, "move from tmp_link/victim")
	})
	t.Run("move ok.txt to ../moved", func(t *testing.T) {
		_, err := fc.Move(context.Background(), &pb.MoveRequest{From: "ok.txt", To: "../moved"})
		refused(t, err, "move to ../moved", codes.InvalidArgument)
	})
	t.Run("remove tmp_link/victim", func(t *testing.T) {
		_, err := fc.Remove(context.Background(), &pb.RemoveRequest{Path: "tmp_link/victim"})
		refused(t, err, "remove tmp_link/victim")
	})
	t.Run("remove through root_link, recursively", func(t *testing.T) {
		_, err := fc.Remove(context.Background(), &pb.RemoveRequest{Path: "root_link/tmp", Recursive: true})
		refused(t, err, "remove root_link/tmp")
	})
	t.Run("watch tmp_link", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		stream, err := fc.Watch(ctx, &pb.WatchRequest{Path: "tmp_link", Recursive: true})
		if err == nil {
			var ev *pb.FileEvent
			if ev, err = stream.Recv(); err == nil {
				t.Errorf("ESCAPE: watching tmp_link gave an event: %v", ev)
			}
		}
		if status.Code(err) == codes.DeadlineExceeded {
			t.Errorf("ESCAPE: a watch on tmp_link was set up (it waited for events)")
			return
		}
		refused(t, err, "watch tmp_link")
	})

	t.Run("nothing changed outside the workspace", func(t *testing.T) {
		got := b.mustExec(t, "ls -a /tmp; cat /tmp/victim; cat /etc/hostname")
		for _, bad := range []string{"evil", "moved", "newdir", "\nd\n", "escaped"} {
			if strings.Contains(got, bad) {
				t.Errorf("ESCAPE: the file API changed the sandbox outside its workspace (%q): %s", bad, got)
			}
		}
		if !strings.Contains(got, "victim\n") {
			t.Errorf("ESCAPE: /tmp/victim was moved or removed through the file API: %s", got)
		}
		parent := filepath.Dir(b.ws)
		for _, name := range []string{"x", "moved"} {
			if _, err := os.Lstat(filepath.Join(parent, name)); err == nil {
				t.Errorf("ESCAPE: the file API wrote %s next to the workspace on the host", name)
			}
		}
	})
}

// refused fails the test unless err is a refusal (one of codes, when given; any of the
// refusing codes otherwise).
func refused(t *testing.T, err error, what string, want ...codes.Code) {
	t.Helper()
	if err == nil {
		t.Errorf("ESCAPE: %s succeeded", what)
		return
	}
	if len(want) == 0 {
		want = []codes.Code{codes.PermissionDenied, codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition}
	}
	for _, c := range want {
		if status.Code(err) == c {
			return
		}
	}
	t.Errorf("%s failed, but with %v; want one of %v", what, err, want)
}

func readFile(fc pb.FilesClient, p string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := fc.Read(ctx, &pb.ReadRequest{Path: p})
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	for {
		c, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return buf.String(), nil
		}
		if err != nil {
			return buf.String(), err
		}
		buf.Write(c.GetData())
	}
}

func writeFile(fc pb.FilesClient, p, data string) (*pb.FileInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := fc.Write(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&pb.WriteRequest{Path: p, Data: []byte(data), MakeParents: true}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return stream.CloseAndRecv()
}

func entryNames(ls *pb.ListFilesResponse) string {
	var names []string
	for _, e := range ls.GetEntries() {
		names = append(names, e.GetPath())
	}
	return strings.Join(names, ",")
}
