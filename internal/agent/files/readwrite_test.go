package files

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"math"
	"os"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/paddockhq/paddock/internal/wire/agentv1"
)

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// TestReadWriteRoundTrip writes and reads back files of every shape, in both orders of a
// replacement's sync and rename (see renameFirstOn).
func TestReadWriteRoundTrip(t *testing.T) {
	for _, renameFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("renameFirst=%v", renameFirst), func(t *testing.T) {
			testReadWriteRoundTrip(t, newEnv(t, func(s *Service) { s.renameFirst = renameFirst }))
		})
	}
}

func testReadWriteRoundTrip(t *testing.T, e *env) {
	big := randomBytes(t, 5<<20)
	tests := []struct {
		name    string
		req     *agentv1.WriteRequest
		data    []byte
		chunk   int
		wantRel string
	}{
		{"small text", &agentv1.WriteRequest{Path: "a.txt"}, []byte("hello\n"), 1024, "a.txt"},
		{"empty file", &agentv1.WriteRequest{Path: "empty"}, nil, 1024, "empty"},
		{"5 MiB random in 64 KiB messages", &agentv1.WriteRequest{Path: "big.bin"}, big, 64 << 10, "big.bin"},
		{"5 MiB in 1 MiB messages", &agentv1.WriteRequest{Path: "big2.bin"}, big, 1 << 20, "big2.bin"},
		{"one byte per message", &agentv1.WriteRequest{Path: "bytes"}, []byte("abcdef"), 1, "bytes"},
		{"make parents", &agentv1.WriteRequest{Path: "x/y/z.txt", MakeParents: true}, []byte("deep"), 2, "x/y/z.txt"},
		{"absolute path", &agentv1.WriteRequest{Path: "/abs.txt"}, []byte("abs"), 8, "abs.txt"},
		{"sandbox path", &agentv1.WriteRequest{Path: "/workspace/x/w.txt"}, []byte("ws"), 8, "x/w.txt"},
		{"unclean path", &agentv1.WriteRequest{Path: "x//./y/../q.txt"}, []byte("q"), 8, "x/q.txt"},
		{"overwrite", &agentv1.WriteRequest{Path: "a.txt"}, []byte("second version"), 3, "a.txt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := ctxT(t)
			info, err := e.put(ctx, tt.req, tt.data, tt.chunk)
			must(t, err)
			if info.Path != tt.wantRel || info.Size != uint64(len(tt.data)) || info.Type != agentv1.FileType_FILE_TYPE_FILE {
				t.Errorf("info = %v, want path %q size %d type file", info, tt.wantRel, len(tt.data))
			}
			if got := e.hostRead(t, tt.wantRel); got != string(tt.data) {
				t.Fatalf("host file differs from what was written (%d bytes, want %d)", len(got), len(tt.data))
			}
			got, _, err := e.get(ctx, &agentv1.ReadRequest{Path: tt.req.Path})
			must(t, err)
			if !bytes.Equal(got, tt.data) {
				t.Fatalf("read back %d bytes, differing from the %d written", len(got), len(tt.data))
			}
		})
	}
	if left := e.tempFiles(t); len(left) > 0 {
		t.Errorf("temp files left behind: %v", left)
	}
}

func TestReadRanges(t *testing.T) {
	e := newEnv(t)
	data := randomBytes(t, 5<<20)
	must(t, os.WriteFile(e.host("big.bin"), data, 0o644))
	size := uint64(len(data))
	tests := []struct {
		name           string
		offset, length uint64
		want           []byte
	}{
		{"whole file", 0, 0, data},
		{"first byte", 0, 1, data[:1]},
		{"across a chunk boundary", ChunkSize - 10, 20, data[ChunkSize-10 : ChunkSize+10]},
		{"exactly one chunk", ChunkSize, ChunkSize, data[ChunkSize : 2*ChunkSize]},
		{"middle to EOF", 3 << 20, 0, data[3<<20:]},
		{"length past EOF", size - 5, 100, data[size-5:]},
		{"huge length", 1, math.MaxUint64, data[1:]},
		{"offset at EOF", size, 0, nil},
		{"offset past EOF", size + 10, 5, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, chunks, err := e.get(ctxT(t), &agentv1.ReadRequest{Path: "big.bin", Offset: tt.offset, Length: tt.length})
			must(t, err)
			if !bytes.Equal(got, tt.want) {
				t.Fatalf("got %d bytes, want %d (or content differs)", len(got), len(tt.want))
			}
			checkChunks(t, chunks, tt.offset)
		})
	}
}

// checkChunks checks chunks are at most ChunkSize, contiguous from offset, and that a
// large read is really streamed in several.
func checkChunks(t *testing.T, chunks []*agentv1.FileChunk, offset uint64) {
	t.Helper()
	total := 0
	for _, c := range chunks {
		if len(c.Data) > ChunkSize || c.Offset != offset {
			t.Fatalf("chunk of %d bytes at %d, want at most %d at %d", len(c.Data), c.Offset, ChunkSize, offset)
		}
		offset += uint64(len(c.Data))
		total += len(c.Data)
	}
	if wantChunks := (total + ChunkSize - 1) / ChunkSize; len(chunks) != wantChunks {
		t.Errorf("%d bytes came in %d chunks, want %d", total, len(chunks), wantChunks)
	}
}

func TestReadErrors(t *testing.T) {
	e := newEnv(t)
	e.plant(t, "dir/", "a.txt")
	must(t, syscall.Mkfifo(e.host("fifo"), 0o644))
	tests := []struct {
		name string
		req  *agentv1.ReadRequest
		want codes.Code
	}{
		{"missing", &agentv1.ReadRequest{Path: "nope.txt"}, codes.NotFound},
		{"missing parent", &agentv1.ReadRequest{Path: "nope/a.txt"}, codes.NotFound},
		{"directory", &agentv1.ReadRequest{Path: "dir"}, codes.InvalidArgument},
		{"workspace", &agentv1.ReadRequest{Path: "/"}, codes.InvalidArgument},
		{"planted FIFO does not hang", &agentv1.ReadRequest{Path: "fifo"}, codes.InvalidArgument},
		{"file as a directory", &agentv1.ReadRequest{Path: "a.txt/x"}, codes.FailedPrecondition},
		{"offset beyond int64", &agentv1.ReadRequest{Path: "a.txt", Offset: math.MaxInt64 + 1}, codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			_, _, err := e.get(ctx, tt.req)
			e.wantCode(t, err, tt.want)
		})
	}
}

func TestWriteIsAtomic(t *testing.T) {
	const old = "old content"
	t.Run("cancelled midway", func(t *testing.T) {
		e := newEnv(t)
		e.plant(t, "f.txt")
		must(t, os.WriteFile(e.host("f.txt"), []byte(old), 0o644))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		stream, err := e.c.Write(ctx)
		must(t, err)
		must(t, stream.Send(&agentv1.WriteRequest{Path: "f.txt", Data: []byte("new, part one")}))
		must(t, stream.Send(&agentv1.WriteRequest{Data: randomBytes(t, 1<<20)}))
		eventually(t, "the server to start a temp file", func() bool { return len(e.tempFiles(t)) > 0 })
		if got := e.hostRead(t, "f.txt"); got != old {
			t.Fatalf("file changed while the write was in flight: %q", got)
		}
		cancel()
		eventually(t, "the temp file to be removed", func() bool { return len(e.tempFiles(t)) == 0 })
		if got := e.hostRead(t, "f.txt"); got != old {
			t.Fatalf("file = %q after a cancelled write, want the old content", got)
		}
	})
	t.Run("over the size limit", func(t *testing.T) {
		e := newEnv(t, func(s *Service) { s.maxWrite = 1000 })
		must(t, os.WriteFile(e.host("f.txt"), []byte(old), 0o644))
		_, err := e.put(ctxT(t), &agentv1.WriteRequest{Path: "f.txt"}, randomBytes(t, 1001), 100)
		e.wantCode(t, err, codes.ResourceExhausted)
		if got := e.hostRead(t, "f.txt"); got != old {
			t.Fatalf("file = %q after a refused write, want the old content", got)
		}
		if left := e.tempFiles(t); len(left) > 0 {
			t.Fatalf("temp files left behind: %v", left)
		}
		_, err = e.put(ctxT(t), &agentv1.WriteRequest{Path: "f.txt"}, randomBytes(t, 1000), 100)
		must(t, err) // exactly at the limit is fine
	})
}

func TestWriteMode(t *testing.T) {
	old := syscall.Umask(0o077) // a strict umask must not cut the requested mode
	defer syscall.Umask(old)
	e := newEnv(t)
	tests := []struct {
		name      string
		mode      uint32
		want      os.FileMode
		wantWire  uint32
		wantError codes.Code
	}{
		{"default", 0, 0o644, 0o644, codes.OK},
		{"private", 0o600, 0o600, 0o600, codes.OK},
		{"executable", 0o755, 0o755, 0o755, codes.OK},
		{"world writable despite umask", 0o777, 0o777, 0o777, codes.OK},
		{"setuid refused", 0o4755, 0, 0, codes.InvalidArgument},
		{"setgid refused", 0o2755, 0, 0, codes.InvalidArgument},
		{"type bits refused", 0o100644, 0, 0, codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info, err := e.put(ctxT(t), &agentv1.WriteRequest{Path: "m", Mode: tt.mode}, []byte("x"), 1)
			e.wantCode(t, err, tt.wantError)
			if err != nil {
				return
			}
			fi, err := os.Lstat(e.host("m"))
			must(t, err)
			if fi.Mode() != tt.want || info.Mode != tt.wantWire {
				t.Errorf("mode on disk %v, reported %#o; want %v, %#o", fi.Mode(), info.Mode, tt.want, tt.wantWire)
			}
		})
	}
}

func TestWriteErrors(t *testing.T) {
	e := newEnv(t)
	e.plant(t, "dir/", "dir/keep", "a.txt")
	tests := []struct {
		name string
		req  *agentv1.WriteRequest
		want codes.Code
	}{
		{"onto a directory", &agentv1.WriteRequest{Path: "dir"}, codes.InvalidArgument},
		{"onto the workspace", &agentv1.WriteRequest{Path: "/workspace"}, codes.InvalidArgument},
		{"onto the workspace as /", &agentv1.WriteRequest{Path: "/", MakeParents: true}, codes.InvalidArgument},
		{"missing parent", &agentv1.WriteRequest{Path: "nope/a.txt"}, codes.NotFound},
		{"parent is a file", &agentv1.WriteRequest{Path: "a.txt/b", MakeParents: true}, codes.FailedPrecondition},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.put(ctxT(t), tt.req, []byte("data"), 2)
			e.wantCode(t, err, tt.want)
		})
	}
	t.Run("empty stream", func(t *testing.T) {
		stream, err := e.c.Write(ctxT(t))
		must(t, err)
		_, err = stream.CloseAndRecv()
		e.wantCode(t, err, codes.InvalidArgument)
	})
	if fi, err := os.Stat(e.host("dir/keep")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("directory written over: %v", err)
	}
	if left := e.tempFiles(t); len(left) > 0 {
		t.Errorf("temp files left behind: %v", left)
	}
}
