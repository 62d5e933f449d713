package agentclient

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/paddockhq/paddock/internal/errdefs"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// agentSide is the other side of the channel, served over a real gRPC connection on a
// Unix socket: it answers as an agent does, errors included.
type agentSide struct {
	pb.UnimplementedProcessServer
	pb.UnimplementedAgentServer
	deadlines chan time.Duration // how long Info's caller gave it (0: no deadline)
}

// filesSide is the agent's Files service (apart: Files and Process both have a List).
type filesSide struct{ pb.UnimplementedFilesServer }

func (a *agentSide) Execute(_ context.Context, req *pb.ExecuteRequest) (*pb.ExecuteResponse, error) {
	if req.GetArgv()[0] == "missing" {
		return nil, status.Error(codes.NotFound, "missing: no such program")
	}
	return &pb.ExecuteResponse{Stdout: []byte("ok")}, nil
}

func (a *agentSide) Info(ctx context.Context, _ *pb.InfoRequest) (*pb.InfoResponse, error) {
	var left time.Duration
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d)
	}
	a.deadlines <- left
	return &pb.InfoResponse{}, nil
}

func (filesSide) Read(req *pb.ReadRequest, stream grpc.ServerStreamingServer[pb.FileChunk]) error {
	if err := stream.Send(&pb.FileChunk{Data: []byte("ab")}); err != nil {
		return err
	}
	if req.GetPath() == "whole" {
		return nil
	}
	return status.Error(codes.PermissionDenied, "resource file:/workspace/secret outside file:/workspace/src")
}

func dial(t testing.TB) (*Client, *agentSide) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	a := &agentSide{deadlines: make(chan time.Duration, 1)}
	srv := grpc.NewServer()
	pb.RegisterProcessServer(srv, a)
	pb.RegisterAgentServer(srv, a)
	pb.RegisterFilesServer(srv, filesSide{})
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	c := New(conn)
	t.Cleanup(func() { c.Close() })
	return c, a
}

// The agent's errors arrive in the taxonomy with its message; a stream's end stays io.EOF.
func TestErrorsInTheTaxonomy(t *testing.T) {
	c, _ := dial(t)
	ctx := t.Context()
	if res, err := c.Execute(ctx, &pb.ExecuteRequest{Argv: []string{"true"}}); err != nil || string(res.GetStdout()) != "ok" {
		t.Fatalf("Execute: %v, %v", res, err)
	}
	_, err := c.Execute(ctx, &pb.ExecuteRequest{Argv: []string{"missing"}})
	if !errors.Is(err, errdefs.ErrNotFound) || err.Error() != "missing: no such program" {
		t.Errorf("Execute of a missing program: %v, want ErrNotFound with the agent's message", err)
	}
	for _, tc := range []struct {
		path string
		want error
	}{{"whole", io.EOF}, {"secret", errdefs.ErrPermissionDenied}} {
		s, err := c.Read(ctx, &pb.ReadRequest{Path: tc.path})
		if err != nil {
			t.Fatal(err)
		}
		if m, err := s.Recv(); err != nil || string(m.GetData()) != "ab" {
			t.Fatalf("Read %s: first chunk %v, %v", tc.path, m, err)
		}
		if _, err := s.Recv(); !errors.Is(err, tc.want) {
			t.Errorf("Read %s: end %v, want %v", tc.path, err, tc.want)
		}
	}
	if err := Err(status.Error(codes.Unavailable, "the agent is gone")); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "gone") {
		t.Errorf("Err(Unavailable) = %v", err)
	}
}

// A short call gets ShortCall when its caller set no deadline, and keeps the caller's
// otherwise.
func TestShortCallDeadline(t *testing.T) {
	c, a := dial(t)
	if _, err := c.Info(context.Background()); err != nil {
		t.Fatal(err)
	}
	if left := <-a.deadlines; left <= 0 || left > ShortCall {
		t.Errorf("Info without a deadline: the agent saw %v left, want at most %v", left, ShortCall)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*ShortCall)
	defer cancel()
	if _, err := c.Info(ctx); err != nil {
		t.Fatal(err)
	}
	if left := <-a.deadlines; left <= ShortCall {
		t.Errorf("Info under a longer deadline: the agent saw %v left, want the caller's", left)
	}
}

// Execute through the client against the generated stub: the allocations per call should
// be the same (go test -bench Execute -benchmem).
func BenchmarkExecute(b *testing.B) {
	c, _ := dial(b)
	req := &pb.ExecuteRequest{Argv: []string{"true"}}
	b.Run("client", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Execute(b.Context(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stub", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Process().Execute(b.Context(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
