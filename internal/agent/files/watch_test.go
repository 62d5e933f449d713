package files

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/paddockhq/paddock/internal/wire/agentv1"
)

const (
	created = agentv1.FileEventKind_FILE_EVENT_KIND_CREATE
	written = agentv1.FileEventKind_FILE_EVENT_KIND_WRITE
	removed = agentv1.FileEventKind_FILE_EVENT_KIND_REMOVE
	renamed = agentv1.FileEventKind_FILE_EVENT_KIND_RENAME
)

// events is a running Watch call, its events gathered as they come.
type events struct {
	ch  chan *agentv1.FileEvent
	err chan error
}

// startWatch calls Watch and returns once the watch is in place (the headers arrived).
func (e *env) startWatch(ctx context.Context, t *testing.T, req *agentv1.WatchRequest) *events {
	t.Helper()
	stream, err := e.c.Watch(ctx, req)
	must(t, err)
	if _, err := stream.Header(); err != nil {
		t.Fatal(err)
	}
	ev := &events{ch: make(chan *agentv1.FileEvent, 1000), err: make(chan error, 1)}
	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				ev.err <- err
				return
			}
			ev.ch <- msg
		}
	}()
	return ev
}

func key(kind agentv1.FileEventKind, path string) string { return kind.String() + " " + path }

// expect waits for each of want, in any order, and returns the events seen meanwhile.
func (ev *events) expect(t *testing.T, want ...string) []string {
	t.Helper()
	missing := map[string]bool{}
	for _, w := range want {
		missing[w] = true
	}
	var seen []string
	timeout := time.After(5 * time.Second)
	for len(missing) > 0 {
		select {
		case msg := <-ev.ch:
			k := key(msg.Kind, msg.Path)
			seen = append(seen, k)
			delete(missing, k)
		case err := <-ev.err:
			t.Fatalf("watch ended: %v; seen %v", err, seen)
		case <-timeout:
			t.Fatalf("never saw %v; seen %v", missing, seen)
		}
	}
	return seen
}

func TestWatchNewSubdirectory(t *testing.T) {
	e := newEnv(t)
	ev := e.startWatch(ctxT(t), t, &agentv1.WatchRequest{Path: ".", Recursive: true})
	must(t, os.Mkdir(e.host("sub"), 0o755))
	ev.expect(t, key(created, "sub")) // sent once sub itself is watched
	steps := []struct {
		name string
		do   func() error
		want []string
	}{
		{"create", func() error { return os.WriteFile(e.host("sub/f.txt"), nil, 0o644) }, []string{key(created, "sub/f.txt")}},
		{"write", func() error { return appendTo(e.host("sub/f.txt"), "more") }, []string{key(written, "sub/f.txt")}},
		{"rename", func() error { return os.Rename(e.host("sub/f.txt"), e.host("sub/g.txt")) },
			[]string{key(renamed, "sub/f.txt"), key(created, "sub/g.txt")}},
		{"remove", func() error { return os.Remove(e.host("sub/g.txt")) }, []string{key(removed, "sub/g.txt")}},
		{"mkdir -p", func() error { return os.MkdirAll(e.host("sub/x/y/z"), 0o755) },
			[]string{key(created, "sub/x"), key(created, "sub/x/y"), key(created, "sub/x/y/z")}},
		{"deep file", func() error { return os.WriteFile(e.host("sub/x/y/z/deep.txt"), []byte("d"), 0o644) },
			[]string{key(created, "sub/x/y/z/deep.txt"), key(written, "sub/x/y/z/deep.txt")}},
		{"remove tree", func() error { return os.RemoveAll(e.host("sub/x")) },
			[]string{key(removed, "sub/x/y/z/deep.txt"), key(removed, "sub/x")}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			must(t, s.do())
			ev.expect(t, s.want...)
		})
	}
}

func appendTo(path, data string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(data)
	return err
}

// TestWatchScope checks what a watch must not report: changes below a non-recursive
// watch's directory, and anything behind a symlinked directory. A marker file written
// last bounds the wait.
func TestWatchScope(t *testing.T) {
	tests := []struct {
		name      string
		recursive bool
		change    func(e *env) error
		forbidden string
	}{
		{"non-recursive skips subdirectories", false,
			func(e *env) error { return os.WriteFile(e.host("sub/f.txt"), nil, 0o644) }, "sub/"},
		{"symlinked dir outside is not followed", true,
			func(e *env) error { return os.WriteFile(e.outside+"/new.txt", nil, 0o644) }, "outdir/"},
		{"symlinked dir inside is not followed", true,
			func(e *env) error { return os.WriteFile(e.host("sub/f.txt"), nil, 0o644) }, "inlink/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.plant(t, "sub/", "outdir -> ../outside", "inlink -> sub")
			ev := e.startWatch(ctxT(t), t, &agentv1.WatchRequest{Path: "/workspace", Recursive: tt.recursive})
			must(t, tt.change(e))
			must(t, os.WriteFile(e.host("marker"), nil, 0o644))
			for _, seen := range ev.expect(t, key(created, "marker")) {
				if strings.Contains(seen, " "+tt.forbidden) {
					t.Fatalf("reported %q", seen)
				}
			}
		})
	}
}

func TestWatchFile(t *testing.T) {
	e := newEnv(t)
	e.plant(t, "dir/a.txt")
	ev := e.startWatch(ctxT(t), t, &agentv1.WatchRequest{Path: "dir/a.txt"})
	must(t, appendTo(e.host("dir/a.txt"), "x"))
	ev.expect(t, key(written, "dir/a.txt"))
}

func TestWatchErrors(t *testing.T) {
	e := newEnv(t, func(s *Service) { s.maxWatches = 3 })
	e.plant(t, "a/", "b/", "c/", "d/")
	tests := []struct {
		name string
		req  *agentv1.WatchRequest
		want codes.Code
	}{
		{"missing", &agentv1.WatchRequest{Path: "nope"}, codes.NotFound},
		{"too many directories", &agentv1.WatchRequest{Path: ".", Recursive: true}, codes.ResourceExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream, err := e.c.Watch(ctxT(t), tt.req)
			must(t, err)
			_, err = stream.Recv()
			e.wantCode(t, err, tt.want)
		})
	}
}

// TestWatchEndsWithCaller checks that a cancelled watch ends and releases the descriptors it
// held for its directories.
func TestWatchEndsWithCaller(t *testing.T) {
	e := newEnv(t)
	for i := range 20 {
		e.plant(t, fmt.Sprintf("d%d/", i))
	}
	_, err := e.c.Stat(ctxT(t), &agentv1.StatRequest{Path: "."}) // connect first: the connection holds fds too
	must(t, err)
	before := openFDs(t)
	ctx, cancel := context.WithCancel(t.Context())
	ev := e.startWatch(ctx, t, &agentv1.WatchRequest{Path: ".", Recursive: true})
	if during := openFDs(t); during < before+20 {
		t.Fatalf("%d descriptors open during the watch, want at least %d", during, before+20)
	}
	cancel()
	select {
	case err := <-ev.err:
		e.wantCode(t, err, codes.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not end")
	}
	eventually(t, "the watch's descriptors to be closed", func() bool { return openFDs(t) <= before })
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	must(t, err)
	return len(ents)
}
