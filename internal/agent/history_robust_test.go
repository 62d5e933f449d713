package agent

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paddockhq/paddock/internal/agent/history"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// A truncated history index: every History call says the history is unavailable and why,
// naming the index, and the agent keeps serving everything else.
func TestHistoryCorruptIndexKeepsAgentServing(t *testing.T) {
	a := startHistoryAgentWith(t, wire.TierContainer, nil, func(ws, store string) {
		h, err := history.Open(ws, store)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, "f"), []byte("1"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := h.Checkpoint(history.CauseManual, "one"); err != nil {
			t.Fatal(err)
		}
		h.Close()
		p := filepath.Join(store, "index.json")
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b[:len(b)/2], 0o600); err != nil {
			t.Fatal(err)
		}
	})
	hc := pb.NewHistoryClient(a.conn)
	for name, call := range map[string]func() error{
		"list": func() error { _, err := hc.List(ctx(t), &pb.HistoryListRequest{}); return err },
		"undo": func() error { _, err := hc.Undo(ctx(t), &pb.UndoRequest{}); return err },
	} {
		err := call()
		if c := status.Code(err); (c != codes.Unavailable && c != codes.DataLoss) || !strings.Contains(err.Error(), "index.json") || !strings.Contains(err.Error(), "corrupt") {
			t.Errorf("%s with a truncated index: %v, want Unavailable or DataLoss naming the corrupt index.json", name, err)
		}
	}
	if _, err := pb.NewAgentClient(a.conn).Info(ctx(t), &pb.InfoRequest{}); err != nil {
		t.Fatalf("info: %v", err)
	}
	a.writeFile(t, "g", "written")
	if got := a.content(t, "g"); got != "written" {
		t.Fatalf("file API: g = %q", got)
	}
	resp, err := pb.NewProcessClient(a.conn).Execute(ctx(t), &pb.ExecuteRequest{Argv: []string{"cat", "g"}})
	if err != nil || string(resp.Stdout) != "written" {
		t.Fatalf("execute: %v %v", resp, err)
	}
}

// The app is killed in every way this host can bound without the runner's cgroups, and
// after each the agent still answers, the app is started again, and undo restores the
// files and restarts the app on them.
//
// Not here: a fork bomb and the kernel's OOM killer need the pids and memory cgroups the
// runner sets up (see the runner's TestSupervisedForkBomb); this test runs as a plain
// process, as root, where RLIMIT_NPROC binds nothing. The memory hog is bounded by
// RLIMIT_AS instead: it dies of its allocation failing, not of the OOM killer.
func TestAppKilledEveryWayUndoStillWorks(t *testing.T) {
	shortBackoff(t, 20*time.Millisecond, 100*time.Millisecond, 10*time.Second)
	ctl := t.TempDir() // outside the workspace: the app's traces are not history
	script := `echo $$ > ` + ctl + `/pid; cat v >> ` + ctl + `/log; echo >> ` + ctl + `/log
while :; do
  if [ -e ` + ctl + `/exit ]; then rm ` + ctl + `/exit; exit 3; fi
  if [ -e ` + ctl + `/hog ]; then rm ` + ctl + `/hog; ulimit -v 100000; exec awk 'BEGIN { s = "x"; while (1) s = s s }'; fi
  sleep 0.02
done`
	app := &wire.Command{Argv: []string{"sh", "-c", script}, Restart: true}
	a := startHistoryAgent(t, wire.TierContainer, app)
	a.writeFile(t, "v", "v0")
	appPID := func() int {
		b, _ := os.ReadFile(filepath.Join(ctl, "pid"))
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return pid
	}
	touch := func(name string) func(t *testing.T, pid int) {
		return func(t *testing.T, pid int) {
			if err := os.WriteFile(filepath.Join(ctl, name), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, tc := range []struct {
		name string
		kill func(t *testing.T, pid int)
		died func(*pb.ExitStatus) bool
	}{
		{"own exit", touch("exit"), func(e *pb.ExitStatus) bool { return e.GetExitCode() == 3 }},
		{"SIGKILL from outside", func(t *testing.T, pid int) {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}, func(e *pb.ExitStatus) bool { return e.GetSignal() == 9 }},
		{"memory hog under RLIMIT_AS", touch("hog"), func(e *pb.ExitStatus) bool { return e.GetExitCode() != 0 }},
		{name: "fork bomb"}, // skipped below
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.kill == nil {
				t.Skip("a fork bomb is bounded only by the pids cgroup the runner sets up (runner's TestSupervisedForkBomb); RLIMIT_NPROC does not bind root, which this test runs as")
			}
			prev, next := "v"+strconv.Itoa(i), "v"+strconv.Itoa(i+1)
			a.writeFile(t, "v", next)
			before := waitApp(t, a.conn, func(s *pb.AppStatus) bool { return s.State == appRunning && appPID() > 0 })
			pid := appPID()
			tc.kill(t, pid)
			st := waitApp(t, a.conn, func(s *pb.AppStatus) bool {
				return s.Restarts > before.Restarts && s.State == appRunning && appPID() != pid
			})
			if !tc.died(st.LastExit) {
				t.Errorf("last exit %+v, want the app killed by %s", st.LastExit, tc.name)
			}
			if tc.name == "memory hog under RLIMIT_AS" && !strings.Contains(string(st.LastOutput), "memory") {
				t.Errorf("last output %q, want the hog's out-of-memory error", st.LastOutput)
			}
			if _, err := pb.NewAgentClient(a.conn).Info(ctx(t), &pb.InfoRequest{}); err != nil {
				t.Fatalf("info after the app was killed: %v", err)
			}
			u, err := pb.NewHistoryClient(a.conn).Undo(ctx(t), &pb.UndoRequest{})
			if err != nil {
				t.Fatalf("undo after the app was killed: %v", err)
			}
			if !u.AppRestarted || a.content(t, "v") != prev {
				t.Fatalf("undo: %+v, v = %q; want v %s and the app restarted", u, a.content(t, "v"), prev)
			}
			waitApp(t, a.conn, func(s *pb.AppStatus) bool {
				return s.Restarts > st.Restarts && s.State == appRunning && strings.HasSuffix(readFile(t, filepath.Join(ctl, "log")), prev+"\n")
			})
			// The next round starts from v<i+1> again, on a new timeline.
			a.writeFile(t, "v", next)
		})
	}
}
