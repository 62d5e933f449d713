package runner_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/testenv"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

func create(t *testing.T, spec runner.Spec) *runner.Sandbox {
	t.Helper()
	testenv.RequireRoot(t)
	r := testenv.Runner(t)
	sb, err := r.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sb.Destroy(context.Background()); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
	return sb
}

func tctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// The seed's degraded tier: only the main command runs; sessions say why they cannot.
func TestProcessTierSessionsUnavailable(t *testing.T) {
	sb := create(t, runner.Spec{User: "p", Insecure: true, Main: []string{"sleep", "60"}})
	if sb.Tier != wire.TierProcess {
		t.Fatalf("tier %s", sb.Tier)
	}
	info, err := sb.Agent().Agent().Info(tctx(t), &pb.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.SessionsAvailable || info.SessionsUnavailableReason != wire.ProcessTierReason || info.Tier != "process" {
		t.Fatalf("Info = %+v, want sessions unavailable with the process-tier reason", info)
	}
	pc := sb.Agent().Process()
	_, err = pc.Execute(tctx(t), &pb.ExecuteRequest{Argv: []string{"true"}})
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "process tier") {
		t.Fatalf("Execute: %v, want Unavailable naming the process tier", err)
	}
	st, err := pc.Start(tctx(t), &pb.StartRequest{Argv: []string{"sh"}, Tty: &pb.TTYSize{Rows: 24, Cols: 80}})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("shell session: %v, want Unavailable", err)
	}
	l, err := pc.List(tctx(t), &pb.ListRequest{})
	if err != nil || len(l.Sessions) != 1 || l.Sessions[0].SessionId != wire.MainSessionID || !l.Sessions[0].Running {
		t.Fatalf("List = %v, %v: want only the running main session", l, err)
	}
}

// A container sandbox without a main command serves sessions and files, under either runtime.
func TestContainerSessionsAndFiles(t *testing.T) {
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) { testContainerSessionsAndFiles(t, rt) })
	}
}

func testContainerSessionsAndFiles(t *testing.T, runtime string) {
	sb := create(t, runner.Spec{User: "c", Tier: wire.TierContainer, Runtime: runtime})
	pc, fc := sb.Agent().Process(), sb.Agent().Files()

	w, err := fc.Write(tctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Send(&pb.WriteRequest{Path: "src/main.sh", Data: []byte("echo from file\n"), MakeParents: true, Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	resp, err := pc.Execute(tctx(t), &pb.ExecuteRequest{Argv: []string{"sh", "-c", "./src/main.sh; echo made > out.txt; id -un"}})
	if err != nil || string(resp.Stdout) != "from file\nsandbox\n" {
		t.Fatalf("Execute: %v %v", resp, err)
	}
	r, err := fc.Read(tctx(t), &pb.ReadRequest{Path: "/workspace/out.txt"})
	if err != nil {
		t.Fatal(err)
	}
	chunk, err := r.Recv()
	if err != nil || string(chunk.Data) != "made\n" {
		t.Fatalf("Read: %q %v", chunk.GetData(), err)
	}

	s, err := pc.Start(tctx(t), &pb.StartRequest{Argv: []string{"sh", "-i"}, Tty: &pb.TTYSize{Rows: 24, Cols: 80}, SessionId: "shell"})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := s.Recv(); err != nil || ev.GetStarted().GetSessionId() != "shell" {
		t.Fatalf("first event %v, %v: want Started", ev, err)
	}
	if _, err := pc.WriteStdin(tctx(t), &pb.WriteStdinRequest{SessionId: "shell", Data: []byte("echo $((6*7)); exit\n")}); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for {
		ev, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out.Write(ev.GetOutput().GetData())
	}
	if !strings.Contains(out.String(), "42") {
		t.Fatalf("interactive shell output %q", out.String())
	}
}

// --pids N holds the commands running at once together. Under runc an exec beside the
// main command gets N-1, the main command holding one. Under runsc each command's first
// process is left out of the count (see docs/tiers.md), so k commands at once get N-1+k:
// the exec gets N.
func TestPidsSharedByCommands(t *testing.T) {
	const n = 16
	for _, tt := range []struct {
		runtime string
		want    int
	}{{"runc", n - 1}, {"runsc", n}} {
		t.Run(tt.runtime, func(t *testing.T) {
			sb := create(t, runner.Spec{User: "c", Tier: wire.TierContainer, Runtime: tt.runtime, Main: []string{"sleep", "600"}, Limits: wire.Limits{Pids: n}})
			resp, err := sb.Agent().Process().Execute(tctx(t), &pb.ExecuteRequest{Argv: []string{"python3", "-c", forkCount}})
			if err != nil {
				t.Fatal(err)
			}
			var got int
			if _, err := fmt.Sscanf(string(resp.Stdout), "%d", &got); err != nil || got != tt.want {
				t.Fatalf("an exec beside the main command under --pids %d: %q (stderr %q), want %d processes", n, resp.Stdout, resp.Stderr, tt.want)
			}
		})
	}
}
