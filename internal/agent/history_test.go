package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
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

// historyAgent is a served agent with a history store, as the container tier gives it.
type historyAgent struct {
	conn      *grpc.ClientConn
	ws, store string
}

func startHistoryAgent(t *testing.T, tier wire.Tier, main *wire.Command) historyAgent {
	t.Helper()
	return startHistoryAgentWith(t, tier, main, nil)
}

// startHistoryAgentWith is startHistoryAgent with prepare run on the workspace and the
// store before the agent starts (nil: nothing), to start it on a store with a past.
func startHistoryAgentWith(t *testing.T, tier wire.Tier, main *wire.Command, prepare func(ws, store string)) historyAgent {
	t.Helper()
	dir := t.TempDir()
	a := historyAgent{ws: filepath.Join(dir, "ws"), store: filepath.Join(dir, "history")}
	for _, d := range []string{a.ws, a.store} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if prepare != nil {
		prepare(a.ws, a.store)
	}
	sock := filepath.Join(dir, "agent.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	env := &wire.Envelope{Version: wire.EnvelopeVersion, SandboxID: "sb-test", Tier: tier, Workspace: a.ws, ListenFD: 3,
		Env: []string{"PATH=/usr/bin:/bin"}, Main: main, HistoryDir: a.store}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, env, lis, func(*wire.Envelope) error { return nil }, slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	a.conn, err = grpc.NewClient("unix://"+sock, append(channel.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.conn.Close() })
	return a
}

func (a historyAgent) list(t *testing.T) *pb.HistoryListResponse {
	t.Helper()
	l, err := pb.NewHistoryClient(a.conn).List(ctx(t), &pb.HistoryListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func (a historyAgent) writeFile(t *testing.T, name, data string) {
	t.Helper()
	w, err := pb.NewFilesClient(a.conn).Write(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Send(&pb.WriteRequest{Path: name, Data: []byte(data)}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
}

func (a historyAgent) content(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(a.ws, name))
	if os.IsNotExist(err) {
		return "<none>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestHistoryCheckpointsUndoRedoRestore(t *testing.T) {
	a := startHistoryAgent(t, wire.TierContainer, nil)
	hc := pb.NewHistoryClient(a.conn)

	a.writeFile(t, "a.txt", "one")
	l := a.list(t)
	if len(l.Checkpoints) != 2 {
		t.Fatalf("after one write: %v, want the start and one agent-write", l.Checkpoints)
	}
	w := l.Checkpoints[0]
	if w.Cause != "agent-write" || w.Message != "write a.txt" || w.Changed != 1 || l.Current != w.Id {
		t.Fatalf("newest checkpoint %+v (current %s), want agent-write of a.txt, current", w, l.Current)
	}
	if l.Checkpoints[1].Cause != "watcher" {
		t.Errorf("first checkpoint %+v, want the workspace at start (watcher)", l.Checkpoints[1])
	}
	if l.BudgetBytes != wire.HistoryBudget || l.StoreBytes <= 0 {
		t.Errorf("store %d bytes of a budget of %d, want some of %d", l.StoreBytes, l.BudgetBytes, wire.HistoryBudget)
	}

	if _, err := pb.NewProcessClient(a.conn).Execute(ctx(t), &pb.ExecuteRequest{Argv: []string{"sh", "-c", "echo two > a.txt"}}); err != nil {
		t.Fatal(err)
	}
	e := a.list(t).Checkpoints[0]
	if e.Cause != "exec" || e.Parent != w.Id || e.Message != "exec: sh" {
		t.Fatalf("after exec: %+v, want an exec checkpoint after %s", e, w.Id)
	}
	// An exec that changes nothing records nothing.
	if _, err := pb.NewProcessClient(a.conn).Execute(ctx(t), &pb.ExecuteRequest{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if n := len(a.list(t).Checkpoints); n != 3 {
		t.Fatalf("a command that changed nothing made a checkpoint: %d, want 3", n)
	}
	if c, err := hc.Checkpoint(ctx(t), &pb.CheckpointRequest{Message: "nothing"}); err != nil || c.Created || c.Checkpoint.Id != e.Id {
		t.Fatalf("manual checkpoint of nothing: %+v %v, want the current one, not created", c, err)
	}

	u, err := hc.Undo(ctx(t), &pb.UndoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.content(t, "a.txt"); got != "one" || u.Current != w.Id || u.Checkpoint.Cause != "restore" {
		t.Fatalf("after undo a.txt = %q, response %+v; want \"one\" at %s", got, u, w.Id)
	}
	if u.AppRestarted || u.AppNote == "" {
		t.Errorf("undo without an app: %+v, want a note and no restart", u)
	}
	if _, err := hc.Redo(ctx(t), &pb.RedoRequest{}); err != nil {
		t.Fatal(err)
	}
	if got := a.content(t, "a.txt"); got != "two\n" {
		t.Fatalf("after redo a.txt = %q, want \"two\\n\"", got)
	}
	start := a.list(t).Checkpoints
	if _, err := hc.Restore(ctx(t), &pb.RestoreRequest{Checkpoint: start[len(start)-1].Id}); err != nil {
		t.Fatal(err)
	}
	if got := a.content(t, "a.txt"); got != "<none>" {
		t.Fatalf("after restoring the start a.txt = %q, want none", got)
	}

	_, err = hc.Restore(ctx(t), &pb.RestoreRequest{Checkpoint: "999"})
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), `"999"`) {
		t.Fatalf("restore of a missing checkpoint: %v, want NotFound naming it", err)
	}
	if _, err := hc.Restore(ctx(t), &pb.RestoreRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("restore without a checkpoint: %v, want InvalidArgument", err)
	}
	d, err := hc.Diff(ctx(t), &pb.DiffRequest{To: w.Id})
	if err != nil || len(d.Added) != 1 || d.Added[0] != "a.txt" {
		t.Fatalf("diff of %s: %+v %v, want a.txt added", w.Id, d, err)
	}
}

// setWatchTiming sets the debouncing of watcher checkpoints for one test.
func setWatchTiming(t *testing.T, settle, every time.Duration) {
	oldSettle, oldEvery := settleFor, reconcileEvery
	settleFor, reconcileEvery = settle, every
	t.Cleanup(func() { settleFor, reconcileEvery = oldSettle, oldEvery })
}

// waitCheckpoints waits until the history holds n checkpoints and returns them, newest
// first.
func (a historyAgent) waitCheckpoints(t *testing.T, n int, within time.Duration) []*pb.CheckpointInfo {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		l := a.list(t)
		if len(l.Checkpoints) >= n {
			return l.Checkpoints
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d checkpoints after %v, want %d: %v", len(l.Checkpoints), within, n, l.Checkpoints)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHistoryWatcherPicksUpAnyChange: a change by any process is checkpointed soon after
// it, woken by the watcher, not by the period (set far longer than the test waits).
func TestHistoryWatcherPicksUpAnyChange(t *testing.T) {
	setWatchTiming(t, 50*time.Millisecond, time.Minute)
	a := startHistoryAgent(t, wire.TierContainer, nil)
	a.list(t) // waits for the checkpoint of the workspace at start
	if err := os.WriteFile(filepath.Join(a.ws, "edited"), []byte("by hand"), 0o644); err != nil {
		t.Fatal(err)
	}
	l := a.waitCheckpoints(t, 2, 10*time.Second)
	if c := l[0]; c.Cause != "watcher" || c.Changed != 1 {
		t.Fatalf("newest checkpoint %+v, want the watcher's of one file", c)
	}
	// Quiet workspace, quiet history.
	time.Sleep(300 * time.Millisecond)
	if n := len(a.list(t).Checkpoints); n != 2 {
		t.Fatalf("%d checkpoints of an unchanged workspace, want 2", n)
	}
}

// TestHistoryWatcherDebounces: a burst of changes with short gaps between them is one
// checkpoint, taken once the workspace is quiet; changes that never stop are still
// checkpointed every reconcileEvery.
func TestHistoryWatcherDebounces(t *testing.T) {
	setWatchTiming(t, 600*time.Millisecond, time.Minute)
	a := startHistoryAgent(t, wire.TierContainer, nil)
	a.list(t)
	for i := range 6 {
		if err := os.WriteFile(filepath.Join(a.ws, fmt.Sprintf("burst-%d", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(60 * time.Millisecond)
	}
	a.waitCheckpoints(t, 2, 10*time.Second)
	time.Sleep(900 * time.Millisecond) // a checkpoint per write would have shown by now
	if l := a.list(t).Checkpoints; len(l) != 2 || l[0].Changed != 6 {
		t.Fatalf("checkpoints after a burst of 6 writes: %v, want one of all 6", l)
	}
}

// TestHistoryWatcherCheckpointsAWriterThatNeverStops: a process that never pauses for
// settleFor still has its changes checkpointed, every reconcileEvery.
func TestHistoryWatcherCheckpointsAWriterThatNeverStops(t *testing.T) {
	setWatchTiming(t, 600*time.Millisecond, 400*time.Millisecond)
	a := startHistoryAgent(t, wire.TierContainer, nil)
	a.list(t)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			os.WriteFile(filepath.Join(a.ws, "log"), []byte(strconv.Itoa(i)), 0o644)
			time.Sleep(30 * time.Millisecond)
		}
	}()
	a.waitCheckpoints(t, 4, 10*time.Second)
	stop()
	<-done
}

// TestStreamedExecCheckpointedBeforeItsExit: a streamed command's checkpoint is taken
// before its exit is reported (to Start's stream and to Wait), so that a caller who reads
// the history next finds it, as after Execute.
func TestStreamedExecCheckpointedBeforeItsExit(t *testing.T) {
	setWatchTiming(t, time.Minute, time.Hour) // only the exec's own checkpoint can record it
	testHookBeforeExecRecord = func() { time.Sleep(200 * time.Millisecond) }
	t.Cleanup(func() { testHookBeforeExecRecord = nil })
	a := startHistoryAgent(t, wire.TierContainer, nil)
	a.list(t)
	pc := pb.NewProcessClient(a.conn)
	for i, argv := range [][]string{
		{"sh", "-c", "echo one > streamed.txt"},
		{"sh", "-c", "echo two > streamed.txt"},
	} {
		st, err := pc.Start(ctx(t), &pb.StartRequest{Argv: argv, SessionId: fmt.Sprintf("s%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		exited := false
		for !exited {
			ev, err := st.Recv()
			if err != nil {
				t.Fatalf("stream ended before the exit: %v", err)
			}
			exited = ev.GetExited() != nil
		}
		if i == 1 {
			// The second is also waited for with Wait, which must hold its answer too.
			if _, err := pc.Wait(ctx(t), &pb.WaitRequest{SessionId: "s1"}); err != nil {
				t.Fatal(err)
			}
		}
		l := a.list(t).Checkpoints
		if len(l) != 2+i || l[0].Cause != "exec" {
			t.Fatalf("history right after exit %d: %v, want the exec's checkpoint on top", i, l)
		}
	}
}

// TestUndoRestartsCrashLoopingApp: the app fails at once on the current files; undo still
// works, and the app runs again on the restored ones.
func TestUndoRestartsCrashLoopingApp(t *testing.T) {
	// The app's first start fails (no v yet); its second, after this backoff, must find the
	// bad v: the backoff is long enough for both writes below even on a loaded machine (at
	// 1 s the second start sometimes came between them and found the good one).
	shortBackoff(t, 5*time.Second, 30*time.Second, 10*time.Second)
	log := filepath.Join(t.TempDir(), "runs")
	// The app appends what it found to a log outside the workspace, then fails on "bad".
	app := &wire.Command{Argv: []string{"sh", "-c", `cat v >> ` + log + `; echo >> ` + log + `; test "$(cat v)" = good && exec sleep 1000; exit 1`}, Restart: true}
	a := startHistoryAgent(t, wire.TierContainer, app)
	// The first run must have failed (no v) before v exists: on a loaded machine the app
	// sometimes started only after the write of "good", and then never failed.
	waitApp(t, a.conn, func(s *pb.AppStatus) bool { return s.State == appBackoff && s.Restarts == 0 })
	a.writeFile(t, "v", "good")
	a.writeFile(t, "v", "bad")
	waitApp(t, a.conn, func(s *pb.AppStatus) bool { return s.State == appBackoff && s.Restarts >= 1 })

	u, err := pb.NewHistoryClient(a.conn).Undo(ctx(t), &pb.UndoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !u.AppRestarted || a.content(t, "v") != "good" {
		t.Fatalf("undo: %+v, v = %q; want v good and the app restarted", u, a.content(t, "v"))
	}
	// Started at once on the good file (not after its backoff), and stays up.
	st := waitApp(t, a.conn, func(s *pb.AppStatus) bool {
		return s.State == appRunning && strings.HasSuffix(readFile(t, log), "good\n")
	})
	time.Sleep(300 * time.Millisecond)
	if now := waitApp(t, a.conn, func(*pb.AppStatus) bool { return true }); now.State != appRunning || now.Restarts != st.Restarts {
		t.Fatalf("app after undo: %+v, want it running since %+v", now, st)
	}

	// A running app is restarted too, on the files of the redo.
	if _, err := pb.NewHistoryClient(a.conn).Redo(ctx(t), &pb.RedoRequest{}); err != nil {
		t.Fatal(err)
	}
	waitApp(t, a.conn, func(s *pb.AppStatus) bool {
		return s.Restarts > st.Restarts && strings.HasSuffix(readFile(t, log), "bad\n")
	})
}

// TestRestartAnswersWithTheNewRun: a restart (an undo's, or the app's alone) answers once
// the new run is up, so that a page loaded right after it reaches that run.
func TestRestartAnswersWithTheNewRun(t *testing.T) {
	app := &wire.Command{Argv: []string{"sleep", "1000"}, Restart: true}
	a := startHistoryAgent(t, wire.TierContainer, app)
	before := waitApp(t, a.conn, func(s *pb.AppStatus) bool { return s.State == appRunning })
	for i := range 3 {
		st, err := pb.NewAgentClient(a.conn).RestartApp(ctx(t), &pb.RestartAppRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if st.State != appRunning || st.Restarts != before.Restarts+int32(i)+1 {
			t.Fatalf("restart %d answered %+v, want the new run running (restarts %d)", i, st, before.Restarts+int32(i)+1)
		}
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

func TestHistoryUnavailableOutsideContainerTier(t *testing.T) {
	for _, tc := range []struct {
		tier wire.Tier
		want string
	}{{wire.TierProcess, "process tier"}} {
		a := startHistoryAgent(t, tc.tier, nil)
		_, err := pb.NewHistoryClient(a.conn).List(ctx(t), &pb.HistoryListRequest{})
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s tier: %v, want Unavailable naming the %s", tc.tier, err, tc.want)
		}
		a.writeFile(t, "f", "x") // the file API still works
		if entries, _ := os.ReadDir(a.store); len(entries) != 0 {
			t.Fatalf("%s tier wrote a history store: %v", tc.tier, entries)
		}
	}
}

func TestHistoryRefusesStoreOthersCanReach(t *testing.T) {
	private := t.TempDir()
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := checkPrivate(private); err != nil {
		t.Fatalf("private dir refused: %v", err)
	}
	open := t.TempDir()
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := checkPrivate(open); err == nil || !strings.Contains(err.Error(), "others could reach it") {
		t.Fatalf("checkPrivate(0755) = %v, want refused", err)
	}
}

// A transaction through the agent: its file-API writes and execs make no checkpoint of
// their own, everything that would record or restore is refused naming it, the commit is
// one checkpoint, and a rollback undoes whatever changed since begin.
func TestHistoryTransaction(t *testing.T) {
	a := startHistoryAgent(t, wire.TierContainer, nil)
	hc := pb.NewHistoryClient(a.conn)
	a.writeFile(t, "a.txt", "one")
	base := a.list(t).Current

	b, err := hc.Begin(ctx(t), &pb.BeginRequest{Message: "multi-file edit"})
	if err != nil {
		t.Fatal(err)
	}
	tx := b.Transaction
	if tx.Base != base || tx.Message != "multi-file edit" || tx.Id == "" {
		t.Fatalf("Begin = %+v, want based on %s", tx, base)
	}
	a.writeFile(t, "a.txt", "two")
	a.writeFile(t, "b.txt", "new")
	if _, err := pb.NewProcessClient(a.conn).Execute(ctx(t), &pb.ExecuteRequest{Argv: []string{"sh", "-c", "echo c > c.txt"}}); err != nil {
		t.Fatal(err)
	}
	l := a.list(t)
	if l.Current != base || len(l.Checkpoints) != 2 || l.Transaction.GetId() != tx.Id {
		t.Fatalf("history in a transaction: %v at %s, transaction %v; want no new checkpoint and %s open", l.Checkpoints, l.Current, l.Transaction, tx.Id)
	}
	for name, call := range map[string]func() error{
		"begin":      func() error { _, err := hc.Begin(ctx(t), &pb.BeginRequest{}); return err },
		"undo":       func() error { _, err := hc.Undo(ctx(t), &pb.UndoRequest{}); return err },
		"checkpoint": func() error { _, err := hc.Checkpoint(ctx(t), &pb.CheckpointRequest{}); return err },
	} {
		if err := call(); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "transaction "+tx.Id) {
			t.Errorf("%s in a transaction: %v, want FailedPrecondition naming %s", name, err, tx.Id)
		}
	}
	c, err := hc.Commit(ctx(t), &pb.CommitRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Created || c.Checkpoint.Cause != "transaction" || c.Checkpoint.Message != "multi-file edit" || c.Checkpoint.Changed != 3 || c.Checkpoint.Transaction != tx.Id {
		t.Fatalf("Commit = %+v, want one transaction checkpoint of 3 paths", c)
	}
	if l := a.list(t); l.Transaction != nil || l.Current != c.Checkpoint.Id {
		t.Fatalf("after commit: transaction %v, current %s", l.Transaction, l.Current)
	}

	if _, err := hc.Begin(ctx(t), &pb.BeginRequest{}); err != nil {
		t.Fatal(err)
	}
	a.writeFile(t, "a.txt", "three")
	if err := os.Remove(filepath.Join(a.ws, "b.txt")); err != nil {
		t.Fatal(err)
	}
	r, err := hc.Rollback(ctx(t), &pb.RollbackRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Current != c.Checkpoint.Id || a.content(t, "a.txt") != "two" || a.content(t, "b.txt") != "new" || r.AppNote == "" {
		t.Fatalf("Rollback = %+v: a.txt %q, b.txt %q; want the committed state back", r, a.content(t, "a.txt"), a.content(t, "b.txt"))
	}
	if _, err := hc.Rollback(ctx(t), &pb.RollbackRequest{}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "no transaction is open") {
		t.Fatalf("rollback with none open: %v", err)
	}
}
