package agent

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
	"github.com/paddockhq/paddock/internal/wire/channel"
)

// startAgent serves an agent for a temporary workspace on a real Unix socket, the way the
// runner does, and returns a client connection and the socket path.
func startAgent(t *testing.T, main *wire.Command) (*grpc.ClientConn, string) {
	t.Helper()
	return startAgentTier(t, wire.TierContainer, main)
}

// startAgentTier is startAgent for a tier. In the process tier the agent's confinement is
// skipped: it would confine the test binary itself.
func startAgentTier(t testing.TB, tier wire.Tier, main *wire.Command) (*grpc.ClientConn, string) {
	t.Helper()
	return startAgentEnv(t, tier, main)
}

// startAgentEnv is startAgentTier with env added to the sandbox's environment.
func startAgentEnv(t testing.TB, tier wire.Tier, main *wire.Command, vars ...string) (*grpc.ClientConn, string) {
	t.Helper()
	return startAgentWith(t, tier, main, func(env *wire.Envelope) { env.Env = append(env.Env, vars...) })
}

// startAgentWith is startAgentTier with the envelope adjusted by edit before the agent
// starts.
func startAgentWith(t testing.TB, tier wire.Tier, main *wire.Command, edit func(*wire.Envelope)) (*grpc.ClientConn, string) {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	env := &wire.Envelope{Version: wire.EnvelopeVersion, SandboxID: "sb-test", Tier: tier, Workspace: ws, ListenFD: 3,
		Env: []string{"PATH=/usr/bin:/bin"}, Main: main}
	edit(env)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	noConfine := func(*wire.Envelope) error { return nil }
	go func() { done <- Run(ctx, env, lis, noConfine, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	conn, err := grpc.NewClient("unix://"+sock, append(channel.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, sock
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestExecute(t *testing.T) {
	conn, _ := startAgent(t, nil)
	c := pb.NewProcessClient(conn)
	tests := []struct {
		name               string
		req                *pb.ExecuteRequest
		stdout, stderr     string
		code, signal       int32
		truncOut, timedOut bool
	}{
		{name: "echo", req: &pb.ExecuteRequest{Argv: []string{"echo", "hi"}}, stdout: "hi\n"},
		{name: "stdin", req: &pb.ExecuteRequest{Argv: []string{"cat"}, Stdin: []byte("fed")}, stdout: "fed"},
		{name: "stderr and code", req: &pb.ExecuteRequest{Argv: []string{"sh", "-c", "echo e >&2; exit 4"}}, stderr: "e\n", code: 4},
		{name: "cwd and env", req: &pb.ExecuteRequest{Argv: []string{"sh", "-c", "echo $X; basename $PWD"}, Env: []string{"X=1", "PATH=/bin"}, Cwd: "sub"}, stdout: "1\nsub\n"},
		{name: "bounded", req: &pb.ExecuteRequest{Argv: []string{"head", "-c", "100000", "/dev/zero"}, MaxOutputBytes: 10}, stdout: strings.Repeat("\x00", 10), truncOut: true},
		{name: "timeout", req: &pb.ExecuteRequest{Argv: []string{"sleep", "30"}, TimeoutMs: 200}, code: -1, signal: 9, timedOut: true},
	}
	if err := os.MkdirAll(filepath.Join(workspaceOf(t, conn), "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.Execute(ctx(t), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			st := resp.GetStatus()
			if string(resp.Stdout) != tt.stdout || string(resp.Stderr) != tt.stderr || st.GetExitCode() != tt.code || st.GetSignal() != tt.signal ||
				resp.StdoutTruncated != tt.truncOut || resp.TimedOut != tt.timedOut {
				t.Fatalf("got %+v", resp)
			}
		})
	}
	if l, err := c.List(ctx(t), &pb.ListRequest{}); err != nil || len(l.Sessions) != 0 {
		t.Fatalf("Execute left sessions behind: %v %v", l, err)
	}
}

func workspaceOf(t *testing.T, conn *grpc.ClientConn) string {
	info, err := pb.NewAgentClient(conn).Info(ctx(t), &pb.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return info.Workspace
}

// events reads a session's event stream to the end.
func events(t *testing.T, s interface {
	Recv() (*pb.ProcessEvent, error)
}) (out string, exit *pb.ExitStatus) {
	t.Helper()
	for {
		ev, err := s.Recv()
		if err == io.EOF {
			return out, exit
		}
		if err != nil {
			t.Fatal(err)
		}
		if o := ev.GetOutput(); o != nil {
			out += string(o.Data)
		}
		if e := ev.GetExited(); e != nil {
			exit = e
		}
	}
}

func TestMainSessionAndReattach(t *testing.T) {
	conn, _ := startAgent(t, &wire.Command{Argv: []string{"sh", "-c", "echo one; read x; echo got $x"}})
	c := pb.NewProcessClient(conn)
	// A first client attaches, sees the first line, and goes away.
	c1, cancel := context.WithCancel(ctx(t))
	s, err := c.Attach(c1, &pb.AttachRequest{SessionId: wire.MainSessionID})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetOutput() != nil {
			break
		}
	}
	cancel()
	// The session runs on; a second client feeds stdin and re-attaches from offset 0:
	// it replays "one" and sees the rest.
	if _, err := c.WriteStdin(ctx(t), &pb.WriteStdinRequest{SessionId: wire.MainSessionID, Data: []byte("two\n"), Close: true}); err != nil {
		t.Fatal(err)
	}
	s2, err := c.Attach(ctx(t), &pb.AttachRequest{SessionId: wire.MainSessionID})
	if err != nil {
		t.Fatal(err)
	}
	out, exit := events(t, s2)
	if out != "one\ngot two\n" || exit.GetExitCode() != 0 {
		t.Fatalf("replayed %q exit %+v", out, exit)
	}
	w, err := c.Wait(ctx(t), &pb.WaitRequest{SessionId: wire.MainSessionID})
	if err != nil || w.GetExitCode() != 0 {
		t.Fatalf("wait: %+v %v", w, err)
	}
}

func TestStartTTYAndSignal(t *testing.T) {
	conn, _ := startAgent(t, nil)
	c := pb.NewProcessClient(conn)
	s, err := c.Start(ctx(t), &pb.StartRequest{Argv: []string{"sh", "-c", "stty size; sleep 30"}, Tty: &pb.TTYSize{Rows: 20, Cols: 70}, SessionId: "shell"})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := s.Recv()
	if err != nil || ev.GetStarted().GetSessionId() != "shell" {
		t.Fatalf("first event %v %v", ev, err)
	}
	ev, err = s.Recv()
	if err != nil || !strings.Contains(string(ev.GetOutput().GetData()), "20 70") {
		t.Fatalf("tty size output %v %v", ev, err)
	}
	if _, err := c.ResizeTTY(ctx(t), &pb.ResizeTTYRequest{SessionId: "shell", Size: &pb.TTYSize{Rows: 5, Cols: 5}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SendSignal(ctx(t), &pb.SendSignalRequest{SessionId: "shell", Signal: 15}); err != nil {
		t.Fatal(err)
	}
	_, exit := events(t, s)
	if exit.GetSignal() != 15 {
		t.Fatalf("exit %+v, want SIGTERM", exit)
	}
}

func TestBadRequests(t *testing.T) {
	conn, _ := startAgent(t, nil)
	c := pb.NewProcessClient(conn)
	tests := []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"empty argv", func() error { _, err := c.Execute(ctx(t), &pb.ExecuteRequest{}); return err }, codes.InvalidArgument, "argv"},
		{"NUL in argv", func() error { _, err := c.Execute(ctx(t), &pb.ExecuteRequest{Argv: []string{"a\x00b"}}); return err }, codes.InvalidArgument, "NUL"},
		{"bad env", func() error {
			_, err := c.Execute(ctx(t), &pb.ExecuteRequest{Argv: []string{"true"}, Env: []string{"NOEQUALS"}})
			return err
		}, codes.InvalidArgument, "env[0]"},
		{"huge output bound", func() error {
			_, err := c.Execute(ctx(t), &pb.ExecuteRequest{Argv: []string{"true"}, MaxOutputBytes: 1 << 40})
			return err
		}, codes.InvalidArgument, "max_output_bytes"},
		{"signal 0", func() error {
			_, err := c.SendSignal(ctx(t), &pb.SendSignalRequest{SessionId: "x", Signal: 0})
			return err
		}, codes.InvalidArgument, "signal"},
		{"unknown session", func() error { _, err := c.Wait(ctx(t), &pb.WaitRequest{SessionId: "nope"}); return err }, codes.NotFound, "nope"},
		{"bad session id", func() error {
			s, _ := c.Start(ctx(t), &pb.StartRequest{Argv: []string{"true"}, SessionId: "../x"})
			_, err := s.Recv()
			return err
		}, codes.InvalidArgument, "session ID"},
		{"zero tty", func() error {
			s, _ := c.Start(ctx(t), &pb.StartRequest{Argv: []string{"true"}, Tty: &pb.TTYSize{}})
			_, err := s.Recv()
			return err
		}, codes.InvalidArgument, "tty size"},
		{"resize without size", func() error { _, err := c.ResizeTTY(ctx(t), &pb.ResizeTTYRequest{SessionId: "x"}); return err }, codes.InvalidArgument, "size"},
		{"oversized message", func() error {
			_, err := c.Execute(ctx(t), &pb.ExecuteRequest{Argv: []string{"true"}, Stdin: make([]byte, channel.MaxRequestSize+1)})
			return err
		}, codes.ResourceExhausted, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.msg) {
				t.Fatalf("err = %v, want %v mentioning %q", err, tt.code, tt.msg)
			}
		})
	}
	// The agent is still fine.
	if resp, err := c.Execute(ctx(t), &pb.ExecuteRequest{Argv: []string{"echo", "ok"}}); err != nil || string(resp.Stdout) != "ok\n" {
		t.Fatalf("after bad requests: %v %v", resp, err)
	}
}

func TestGarbageOnTheChannelClosesOnlyThatConnection(t *testing.T) {
	conn, sock := startAgent(t, nil)
	for _, garbage := range [][]byte{
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		bytes.Repeat([]byte{0xff}, 1<<20),
		append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), bytes.Repeat([]byte{0, 0xff, 0xff, 0xff, 0, 0, 0, 0, 1}, 1000)...),
	} {
		raw, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = raw.Write(garbage)
		_ = raw.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.Copy(io.Discard, raw) // the agent closes it
		raw.Close()
	}
	resp, err := pb.NewProcessClient(conn).Execute(ctx(t), &pb.ExecuteRequest{Argv: []string{"echo", "alive"}})
	if err != nil || string(resp.Stdout) != "alive\n" {
		t.Fatalf("after garbage: %v %v", resp, err)
	}
}

func TestProcessTierRefusesSessions(t *testing.T) {
	// The process tier's session manager is disabled by Run; exercise it through the same
	// path with a confiner that does nothing (the real one is tested in internal/harden).
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	env := &wire.Envelope{Version: wire.EnvelopeVersion, SandboxID: "sb-p", Tier: wire.TierProcess, Workspace: dir, ListenFD: 3,
		Env: []string{"PATH=/bin"}, Main: &wire.Command{Argv: []string{"echo", "main runs"}}, Process: &wire.ProcessConfinement{TempDir: dir}}
	c, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = Run(c, env, lis, func(*wire.Envelope) error { return nil }, slog.New(slog.DiscardHandler)) }()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pc := pb.NewProcessClient(conn)
	_, err = pc.Execute(ctx(t), &pb.ExecuteRequest{Argv: []string{"true"}})
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "process tier") {
		t.Fatalf("Execute in the process tier: %v, want Unavailable naming the tier", err)
	}
	info, err := pb.NewAgentClient(conn).Info(ctx(t), &pb.InfoRequest{})
	if err != nil || info.SessionsAvailable || !strings.Contains(info.SessionsUnavailableReason, "process tier") {
		t.Fatalf("Info: %+v %v", info, err)
	}
	s, err := pc.Attach(ctx(t), &pb.AttachRequest{SessionId: wire.MainSessionID})
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := events(t, s); out != "main runs\n" {
		t.Fatalf("main session output %q", out)
	}
}
