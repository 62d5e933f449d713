package agent

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// shortBackoff shrinks the supervisor's backoff for one test.
func shortBackoff(t *testing.T, lo, hi, reset time.Duration) {
	oldMin, oldMax, oldReset := backoffMin, backoffMax, backoffReset
	backoffMin, backoffMax, backoffReset = lo, hi, reset
	t.Cleanup(func() { backoffMin, backoffMax, backoffReset = oldMin, oldMax, oldReset })
}

// waitApp polls App until ok accepts the status.
func waitApp(t *testing.T, conn *grpc.ClientConn, ok func(*pb.AppStatus) bool) *pb.AppStatus {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, err := pb.NewAgentClient(conn).App(ctx(t), &pb.AppRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("App never got there: state %s, restarts %d, output …%q, last output …%q",
				st.State, st.Restarts, lastBytes(st.Output, 200), lastBytes(st.LastOutput, 200))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lastBytes is b's last n bytes at most.
func lastBytes(b []byte, n int) []byte { return b[max(0, len(b)-n):] }

func TestSupervisorRestartsExitingApp(t *testing.T) {
	shortBackoff(t, 20*time.Millisecond, 100*time.Millisecond, 10*time.Second)
	conn, _ := startAgent(t, &wire.Command{Argv: []string{"sh", "-c", "echo up; exit 3"}, Restart: true})
	st := waitApp(t, conn, func(s *pb.AppStatus) bool { return s.Restarts >= 3 && s.LastExit != nil })
	if st.LastExit.ExitCode != 3 || !strings.Contains(string(st.LastOutput), "up") || st.SessionId != wire.MainSessionID {
		t.Fatalf("App = %+v, want last exit 3 with output \"up\" in session main", st)
	}
	// The agent serves throughout.
	for range 5 {
		if _, err := pb.NewAgentClient(conn).Info(ctx(t), &pb.InfoRequest{}); err != nil {
			t.Fatal(err)
		}
		resp, err := pb.NewProcessClient(conn).Execute(ctx(t), &pb.ExecuteRequest{Argv: []string{"echo", "ok"}})
		if err != nil || string(resp.Stdout) != "ok\n" {
			t.Fatalf("Execute: %v %v", resp, err)
		}
	}
	waitApp(t, conn, func(s *pb.AppStatus) bool { return s.Restarts >= st.Restarts+2 })
	// Session "main" is the current run, not a stale one.
	l, err := pb.NewProcessClient(conn).List(ctx(t), &pb.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range l.Sessions {
		if strings.HasPrefix(s.SessionId, "main") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("List = %v, want one main session", l.Sessions)
	}
}

func TestSupervisorRestartsKilledApp(t *testing.T) {
	shortBackoff(t, 20*time.Millisecond, 100*time.Millisecond, 10*time.Second)
	conn, _ := startAgent(t, &wire.Command{Argv: []string{"sh", "-c", "echo $$ > app.pid; exec sleep 60"}, Restart: true})
	waitApp(t, conn, func(s *pb.AppStatus) bool { return s.State == appRunning })
	pid := readPID(t, conn)
	resp, err := pb.NewProcessClient(conn).Execute(ctx(t), &pb.ExecuteRequest{Argv: []string{"kill", "-9", strconv.Itoa(pid)}})
	if err != nil || resp.Status.GetExitCode() != 0 {
		t.Fatalf("kill: %v %v", resp, err)
	}
	st := waitApp(t, conn, func(s *pb.AppStatus) bool { return s.Restarts >= 1 && s.State == appRunning })
	if st.LastExit.GetSignal() != 9 || st.LastExit.GetExitCode() != -1 {
		t.Fatalf("App = %+v, want last exit by SIGKILL", st)
	}
	// The new run is alive and is another process.
	deadline := time.Now().Add(5 * time.Second)
	for readPID(t, conn) == pid {
		if time.Now().After(deadline) {
			t.Fatal("the app was not started again")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readPID(t *testing.T, conn *grpc.ClientConn) int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := pb.NewProcessClient(conn).Execute(ctx(t), &pb.ExecuteRequest{Argv: []string{"cat", "app.pid"}})
		if err != nil {
			t.Fatal(err)
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(resp.Stdout))); err == nil {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no app.pid: %+v", resp)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The delay doubles from run to run up to the cap, and a long run starts it over.
func TestSupervisorBackoff(t *testing.T) {
	shortBackoff(t, 50*time.Millisecond, 400*time.Millisecond, 700*time.Millisecond)
	conn, _ := startAgent(t, &wire.Command{Argv: []string{"sh", "-c", "if [ -e long ]; then rm long; sleep 1; fi; exit 1"}, Restart: true})
	var delays []time.Duration
	seen := int32(-1)
	for len(delays) < 5 {
		st := waitApp(t, conn, func(s *pb.AppStatus) bool { return s.State == appBackoff && s.Restarts != seen })
		seen = st.Restarts
		delays = append(delays, time.Duration(st.NextStartUnixNano-st.SinceUnixNano))
	}
	want := []time.Duration{50, 100, 200, 400, 400}
	for i, d := range delays {
		if w := want[i] * time.Millisecond; d < w-5*time.Millisecond || d > w+20*time.Millisecond {
			t.Fatalf("delays %v, want about %v ms", delays, want)
		}
	}
	// A run longer than backoffReset resets the delay.
	resp, err := pb.NewProcessClient(conn).Execute(ctx(t), &pb.ExecuteRequest{Argv: []string{"touch", "long"}})
	if err != nil || resp.Status.GetExitCode() != 0 {
		t.Fatalf("touch: %v %v", resp, err)
	}
	waitApp(t, conn, func(s *pb.AppStatus) bool { return s.State == appRunning && s.Restarts > seen })
	st := waitApp(t, conn, func(s *pb.AppStatus) bool { return s.State == appBackoff && s.Restarts > seen })
	if d := time.Duration(st.NextStartUnixNano - st.SinceUnixNano); d > 70*time.Millisecond {
		t.Fatalf("delay after a long run = %v, want %v", d, 50*time.Millisecond)
	}
}

func TestAppWithoutSupervisor(t *testing.T) {
	conn, _ := startAgent(t, &wire.Command{Argv: []string{"true"}})
	_, err := pb.NewAgentClient(conn).App(ctx(t), &pb.AppRequest{})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "no supervised app") {
		t.Fatalf("App: %v, want FailedPrecondition no supervised app", err)
	}
}

// App carries the end of the running app's output, bounded and saying when it is cut, and
// the end of the last ended run's.
func TestSupervisorAppOutput(t *testing.T) {
	// Each run says its number; with ./big it writes more than tailBytes first.
	script := `n=$(cat runs 2>/dev/null || echo 0); echo $((n+1)) > runs; echo "run $n started"
if [ -e big ]; then head -c 10000 /dev/zero | tr '\0' x; echo; echo "run $n wrote big"; fi
exec sleep 60`
	conn, _ := startAgent(t, &wire.Command{Argv: []string{"sh", "-c", script}, Restart: true})
	agent := pb.NewAgentClient(conn)
	running := func(line string) func(*pb.AppStatus) bool {
		return func(s *pb.AppStatus) bool { return s.State == appRunning && strings.Contains(string(s.Output), line) }
	}
	st := waitApp(t, conn, running("run 0 started"))
	if st.OutputTruncated || len(st.LastOutput) != 0 {
		t.Fatalf("first run: %+v, want its whole output and no last run", st)
	}

	resp, err := pb.NewProcessClient(conn).Execute(ctx(t), &pb.ExecuteRequest{Argv: []string{"touch", "big"}})
	if err != nil || resp.Status.GetExitCode() != 0 {
		t.Fatalf("touch: %v %v", resp, err)
	}
	if _, err := agent.RestartApp(ctx(t), &pb.RestartAppRequest{}); err != nil {
		t.Fatal(err)
	}
	st = waitApp(t, conn, running("run 1 wrote big"))
	if len(st.Output) > tailBytes || !st.OutputTruncated || strings.Contains(string(st.Output), "run 1 started") {
		t.Fatalf("big run: %d bytes, truncated %v, want its last %d bytes, said to be cut", len(st.Output), st.OutputTruncated, tailBytes)
	}
	if !strings.Contains(string(st.LastOutput), "run 0 started") || st.LastOutputTruncated {
		t.Fatalf("last output %q (truncated %v), want the first run's, whole", st.LastOutput, st.LastOutputTruncated)
	}

	resp, err = pb.NewProcessClient(conn).Execute(ctx(t), &pb.ExecuteRequest{Argv: []string{"rm", "big"}})
	if err != nil || resp.Status.GetExitCode() != 0 {
		t.Fatalf("rm: %v %v", resp, err)
	}
	if _, err := agent.RestartApp(ctx(t), &pb.RestartAppRequest{}); err != nil {
		t.Fatal(err)
	}
	st = waitApp(t, conn, running("run 2 started"))
	if st.OutputTruncated || strings.Contains(string(st.Output), "run 1") {
		t.Fatalf("third run's output %q (truncated %v), want its own only", st.Output, st.OutputTruncated)
	}
	if last := string(st.LastOutput); len(last) > tailBytes || !st.LastOutputTruncated || !strings.Contains(last, "run 1 wrote big") {
		t.Fatalf("last output: %d bytes, truncated %v, want the big run's last %d bytes, said to be cut", len(last), st.LastOutputTruncated, tailBytes)
	}
}

// TestSupervisedAppNeverWaitsForAReader: nobody attaches to a role sandbox's app, so an app
// that writes more than the output log holds must go on running, its oldest output
// dropped, from its first run on.
func TestSupervisedAppNeverWaitsForAReader(t *testing.T) {
	script := `head -c 9000000 /dev/zero | tr '\0' x; echo; echo wrote it all > finished; echo done; exec sleep 60`
	conn, _ := startAgent(t, &wire.Command{Argv: []string{"sh", "-c", script}, Restart: true})
	st := waitApp(t, conn, func(s *pb.AppStatus) bool { return strings.HasSuffix(string(s.Output), "done\n") })
	if !st.OutputTruncated || st.Restarts != 0 {
		t.Fatalf("App = restarts %d, truncated %v; want the first run, its output cut", st.Restarts, st.OutputTruncated)
	}
}
