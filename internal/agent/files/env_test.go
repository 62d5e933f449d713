package files

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/paddockhq/paddock/internal/wire/agentv1"
)

// env is a Files service on a real Unix socket over a fresh workspace, next to a directory
// outside the workspace holding a sentinel file that no call may read or change.
type env struct {
	base     string // parent of the workspace and of outside
	ws       string // the workspace's host path
	outside  string // a directory next to the workspace
	sentinel string // outside/sentinel
	svc      *Service
	c        agentv1.FilesClient
}

const sentinelData = "sentinel: outside the workspace"

// newEnv starts a service; opts adjust it before it serves.
func newEnv(t *testing.T, opts ...func(*Service)) *env {
	t.Helper()
	base := t.TempDir()
	e := &env{base: base, ws: filepath.Join(base, "ws"), outside: filepath.Join(base, "outside")}
	e.sentinel = filepath.Join(e.outside, "sentinel")
	must(t, os.Mkdir(e.ws, 0o755))
	must(t, os.Mkdir(e.outside, 0o755))
	must(t, os.WriteFile(e.sentinel, []byte(sentinelData), 0o644))
	svc, err := New(e.ws, slog.New(slog.NewTextHandler(t.Output(), nil)))
	must(t, err)
	for _, o := range opts {
		o(svc)
	}
	e.svc = svc
	e.c = agentv1.NewFilesClient(serve(t, svc))
	return e
}

// serve registers svc on a gRPC server listening on a Unix socket and returns a client
// connection to it. The socket lives in a short temp dir: sun_path holds 108 bytes.
func serve(t *testing.T, svc *Service) *grpc.ClientConn {
	t.Helper()
	dir, err := os.MkdirTemp("", "files")
	must(t, err)
	sock := filepath.Join(dir, "agent.sock")
	lis, err := net.Listen("unix", sock)
	must(t, err)
	srv := grpc.NewServer()
	agentv1.RegisterFilesServer(srv, svc)
	go srv.Serve(lis)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	must(t, err)
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		svc.Close()
		os.RemoveAll(dir)
	})
	return conn
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// host is the host path of rel in the workspace: what code in the sandbox would touch.
func (e *env) host(rel string) string { return filepath.Join(e.ws, filepath.FromSlash(rel)) }

// plant creates files, directories ("name/") and symlinks ("name -> target") in the
// workspace directly, as code in the sandbox would.
func (e *env) plant(t *testing.T, specs ...string) {
	t.Helper()
	for _, spec := range specs {
		switch name, target, isLink := strings.Cut(spec, " -> "); {
		case isLink:
			must(t, os.Symlink(target, e.host(name)))
		case strings.HasSuffix(spec, "/"):
			must(t, os.MkdirAll(e.host(spec), 0o755))
		default:
			must(t, os.MkdirAll(filepath.Dir(e.host(spec)), 0o755))
			must(t, os.WriteFile(e.host(spec), []byte("content of "+spec), 0o644))
		}
	}
}

func (e *env) hostRead(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(e.host(rel))
	must(t, err)
	return string(b)
}

// put writes data through the service in messages of at most chunk bytes (the first
// message carries data too).
func (e *env) put(ctx context.Context, first *agentv1.WriteRequest, data []byte, chunk int) (*agentv1.FileInfo, error) {
	stream, err := e.c.Write(ctx)
	if err != nil {
		return nil, err
	}
	first.Data, data = cut(data, chunk)
	if err := stream.Send(first); err != nil {
		return nil, err
	}
	for len(data) > 0 {
		var part []byte
		part, data = cut(data, chunk)
		if err := stream.Send(&agentv1.WriteRequest{Data: part}); err != nil {
			break // the server ended the call; CloseAndRecv says why
		}
	}
	return stream.CloseAndRecv()
}

func cut(b []byte, n int) (head, tail []byte) {
	if n > len(b) {
		n = len(b)
	}
	return b[:n], b[n:]
}

// get reads through the service and returns the data and the chunks it came in.
func (e *env) get(ctx context.Context, req *agentv1.ReadRequest) ([]byte, []*agentv1.FileChunk, error) {
	stream, err := e.c.Read(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	var buf bytes.Buffer
	var chunks []*agentv1.FileChunk
	for {
		c, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return buf.Bytes(), chunks, nil
		}
		if err != nil {
			return nil, nil, err
		}
		buf.Write(c.Data)
		chunks = append(chunks, c)
	}
}

// wantCode checks err's gRPC code, and that its message does not give away where the
// workspace is on the host.
func (e *env) wantCode(t *testing.T, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("code = %v, want %v (err: %v)", got, want, err)
	}
	if err != nil && strings.Contains(err.Error(), e.base) {
		t.Errorf("error message leaks the host path: %v", err)
	}
}

// checkOutside fails the test if anything outside the workspace changed.
func (e *env) checkOutside(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(e.sentinel)
	if err != nil || string(b) != sentinelData {
		t.Fatalf("sentinel outside the workspace changed: %q, %v", b, err)
	}
	ents, err := os.ReadDir(e.outside)
	must(t, err)
	names := []string{}
	for _, d := range ents {
		names = append(names, d.Name())
	}
	if !slices.Equal(names, []string{"sentinel"}) {
		t.Fatalf("outside the workspace now holds %v", names)
	}
}

// tempFiles lists Write's temp files left anywhere in the workspace.
func (e *env) tempFiles(t *testing.T) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(e.ws, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), tempPrefix) {
			found = append(found, p)
		}
		return err
	})
	must(t, err)
	return found
}

// eventually polls cond for up to 5s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
