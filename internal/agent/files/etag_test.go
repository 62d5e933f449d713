package files

import (
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paddockhq/paddock/internal/wire/agentv1"
)

// readTag reads p whole, asking for its tag.
func (e *env) readTag(t *testing.T, p string) (string, string) {
	t.Helper()
	data, chunks, err := e.get(ctxT(t), &agentv1.ReadRequest{Path: p, Etag: true})
	must(t, err)
	if len(chunks) == 0 || chunks[0].GetEtag() == "" {
		t.Fatalf("read %s with etag: no tag on the first chunk", p)
	}
	return string(data), chunks[0].GetEtag()
}

func TestWriteIfMatch(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	must(t, os.WriteFile(e.host("a.txt"), []byte("one\n"), 0o644))
	_, tag := e.readTag(t, "a.txt")

	// A change on disk behind the reader's back, of the same size: the save is refused
	// and the change kept.
	must(t, os.WriteFile(e.host("a.txt"), []byte("two\n"), 0o644))
	_, err := e.put(ctx, &agentv1.WriteRequest{Path: "a.txt", IfMatch: tag}, []byte("mine\n"), 64)
	if status.Code(err) != codes.Aborted || !strings.Contains(err.Error(), "changed since it was read") {
		t.Fatalf("stale save: err = %v, want ABORTED naming the change", err)
	}
	if got := e.hostRead(t, "a.txt"); got != "two\n" {
		t.Fatalf("after a refused save the file holds %q, want the change on disk", got)
	}

	// With the current tag it goes through, and answers the new content's tag, which is
	// what the next read gives.
	_, tag = e.readTag(t, "a.txt")
	info, err := e.put(ctx, &agentv1.WriteRequest{Path: "a.txt", IfMatch: tag}, []byte("mine\n"), 2)
	must(t, err)
	if _, now := e.readTag(t, "a.txt"); info.GetEtag() != now || now == tag {
		t.Fatalf("write answered tag %q, a read gives %q (old %q)", info.GetEtag(), now, tag)
	}

	// Deleted meanwhile: refused, nothing made.
	must(t, os.Remove(e.host("a.txt")))
	if _, err := e.put(ctx, &agentv1.WriteRequest{Path: "a.txt", IfMatch: info.GetEtag()}, []byte("x"), 8); status.Code(err) != codes.Aborted || !strings.Contains(err.Error(), "deleted") {
		t.Fatalf("save over a deleted file: err = %v, want ABORTED naming the deletion", err)
	}
	if _, err := os.Stat(e.host("a.txt")); !os.IsNotExist(err) {
		t.Fatalf("a refused save made the file: %v", err)
	}
	if left := e.tempFiles(t); len(left) > 0 {
		t.Errorf("temp files left behind: %v", left)
	}
}

func TestWriteIfMatchOneWins(t *testing.T) {
	// The pause widens the gap between check and rename that the lock must close.
	e := newEnv(t, func(s *Service) { s.beforeCommit = func() { time.Sleep(20 * time.Millisecond) } })
	ctx := ctxT(t)
	must(t, os.WriteFile(e.host("race.txt"), []byte("base"), 0o644))
	_, tag := e.readTag(t, "race.txt")
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = e.put(ctx, &agentv1.WriteRequest{Path: "race.txt", IfMatch: tag}, []byte(strings.Repeat("x", i+1)), 1)
		})
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch status.Code(err) {
		case codes.OK:
			won++
		case codes.Aborted:
		default:
			t.Fatalf("save: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d saves based on one read went through, want exactly 1", won, len(errs))
	}
}

func TestReadEtagEmptyFile(t *testing.T) {
	e := newEnv(t)
	must(t, os.WriteFile(e.host("empty"), nil, 0o644))
	data, tag := e.readTag(t, "empty")
	if data != "" || len(tag) != 2*etagBytes {
		t.Fatalf("empty file: data %q tag %q", data, tag)
	}
}
