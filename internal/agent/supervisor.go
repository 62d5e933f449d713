package agent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/paddockhq/paddock/internal/agent/session"
	"github.com/paddockhq/paddock/internal/errdefs"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// Backoff of the supervised app: the first restart waits backoffMin, each next one twice
// as long up to backoffMax, and a run of at least backoffReset starts the doubling over.
// Variables so that tests can shorten them; a supervisor copies them when it is made, so
// that a test restoring them cannot race with a supervisor still winding down.
var (
	backoffMin   = 100 * time.Millisecond
	backoffMax   = 30 * time.Second
	backoffReset = 10 * time.Second
)

// tailBytes is how much of a run's output AppStatus carries: the end of the current run's
// (read from its session's bounded output log when asked) and of the last ended run's.
const tailBytes = 4 << 10

// App states, as AppStatus reports them.
const (
	appStarting = "starting"
	appRunning  = "running"
	appBackoff  = "backoff"
)

// supervisor keeps the sandbox's app (the main command with Restart set) running: it
// restarts it whenever it exits, under the same session ID, with backoff. It must not
// crash the agent, whatever the app does: it only waits on channels and timers, and a
// start that fails (a fork bomb has taken every pid) is one more exit to back off from.
type supervisor struct {
	m    *session.Manager
	spec session.Spec
	log  *slog.Logger

	backoffMin, backoffMax, backoffReset time.Duration

	// kick asks run to start the app at once, skipping what is left of a backoff (see
	// Restart); buffered, so that a request made while the app runs is not lost.
	kick chan struct{}

	mu     sync.Mutex // guards status and cur
	status *pb.AppStatus
	cur    *session.Session // the current run; nil before the first
}

// restartGrace is how long Restart lets the app end on SIGTERM before it kills it.
var restartGrace = 2 * time.Second

func newSupervisor(m *session.Manager, spec session.Spec, log *slog.Logger) *supervisor {
	return &supervisor{m: m, spec: spec, log: log,
		backoffMin: backoffMin, backoffMax: backoffMax, backoffReset: backoffReset,
		kick:   make(chan struct{}, 1),
		status: &pb.AppStatus{SessionId: spec.ID, State: appStarting, SinceUnixNano: time.Now().UnixNano()}}
}

// run starts the app and keeps restarting it until ctx ends.
func (s *supervisor) run(ctx context.Context) {
	delay := s.backoffMin
	for first := true; ; first = false {
		// One change of state: a client never sees the count of the new run with the
		// state of the last (backoff), which reads as "restarted and failed again".
		s.set(func(st *pb.AppStatus) {
			st.State, st.NextStartUnixNano = appStarting, 0
			if !first {
				st.Restarts++
			}
		})
		started := time.Now()
		sess, err := s.start()
		if err != nil {
			s.log.Error("start app", "err", err) // argv was validated; this should not happen
			s.exited(session.ExitStatus{Code: 126, Err: err.Error()}, nil, false, delay)
		} else {
			s.set(func(st *pb.AppStatus) { st.State, s.cur = appRunning, sess })
			st, err := sess.Wait(ctx)
			if err != nil {
				return // the agent is stopping
			}
			// Leftovers of the app (background children, a fork bomb) go with it, so that
			// the next run starts clean: they would hold its ports and its pids.
			_ = sess.Signal(syscall.SIGKILL)
			if time.Since(started) >= s.backoffReset {
				delay = s.backoffMin
			}
			tail, cut := sess.Tail(tailBytes)
			s.exited(st, tail, cut, delay)
			s.log.Warn("app exited; restarting", "code", st.Code, "signal", st.Signal, "err", st.Err, "in", delay)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
			delay = min(2*delay, s.backoffMax)
		case <-s.kick:
			// Asked for (a restore changed the files): a fresh start, not the next failure
			// of a crash loop.
			delay = s.backoffMin
		}
	}
}

// Restart makes the app start again now, on whatever the workspace holds: a running app is
// sent SIGTERM (SIGKILL after restartGrace), one that crashed is started without waiting
// out its backoff. It returns once the new run has started (or has exited already), at
// most restartWait later: a caller that loads the app's page next (the desktop's preview
// after an undo) reaches the new run, not the old one or none.
func (s *supervisor) Restart() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
	s.mu.Lock()
	sess, restarts := s.cur, s.status.Restarts
	s.mu.Unlock()
	if sess != nil && sess.Running() {
		s.log.Info("restarting app")
		_ = sess.Signal(syscall.SIGTERM)
		time.AfterFunc(restartGrace, func() {
			if sess.Running() {
				_ = sess.Signal(syscall.SIGKILL)
			}
		})
	}
	s.awaitRun(sess, restarts, restartWait)
}

// restartWait bounds how long Restart waits for the new run: a hung app is killed after
// restartGrace, then started again at once.
var restartWait = restartGrace + time.Second

// awaitRun waits until a run after old is running, or one started after restarts has
// exited, or until d has passed. It polls: a state change is a rare event and this keeps
// the supervisor's own loop free of waiters.
func (s *supervisor) awaitRun(old *session.Session, restarts int32, d time.Duration) {
	deadline := time.Now().Add(d)
	for delay := time.Millisecond; time.Now().Before(deadline); delay = min(2*delay, 20*time.Millisecond) {
		s.mu.Lock()
		st, cur := s.status, s.cur
		done := (st.State == appRunning && cur != old) || (st.State == appBackoff && st.Restarts > restarts)
		s.mu.Unlock()
		if done {
			return
		}
		time.Sleep(delay)
	}
}

// start starts the app. No run holds its output for a client, the first included: nobody
// need ever attach to a supervised app, so one that writes more than its log holds must
// go on, its oldest output dropped, rather than block on a full log.
func (s *supervisor) start() (*session.Session, error) {
	spec := s.spec
	spec.HoldOutput = false
	if s.statusRestarts() == 0 {
		return s.m.StartMain(spec)
	}
	return s.m.RestartMain(spec)
}

func (s *supervisor) exited(st session.ExitStatus, tail []byte, cut bool, delay time.Duration) {
	next := time.Now().Add(delay)
	s.set(func(a *pb.AppStatus) {
		a.State, a.LastExit, a.NextStartUnixNano = appBackoff, exitStatus(s.spec.ID, st), next.UnixNano()
		a.LastOutput, a.LastOutputTruncated = tail, cut
	})
}

// set changes the status under the lock and stamps the time of a state change.
func (s *supervisor) set(f func(*pb.AppStatus)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	before := s.status.State
	f(s.status)
	if s.status.State != before {
		s.status.SinceUnixNano = time.Now().UnixNano()
	}
}

func (s *supervisor) statusRestarts() int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status.Restarts
}

// App answers the Agent service's App call.
func (s *supervisor) App() (*pb.AppStatus, error) {
	if s == nil {
		return nil, errdefs.ToGRPC(fmt.Errorf("no supervised app: %w", errdefs.ErrFailedPrecondition))
	}
	s.mu.Lock()
	st, cur := cloneStatus(s.status), s.cur
	s.mu.Unlock()
	if st.State == appRunning && cur != nil {
		st.Output, st.OutputTruncated = cur.Tail(tailBytes)
	}
	return st, nil
}

func cloneStatus(st *pb.AppStatus) *pb.AppStatus {
	c := &pb.AppStatus{State: st.State, Restarts: st.Restarts, SinceUnixNano: st.SinceUnixNano,
		NextStartUnixNano: st.NextStartUnixNano, SessionId: st.SessionId,
		LastOutput: st.LastOutput, LastOutputTruncated: st.LastOutputTruncated}
	if st.LastExit != nil {
		c.LastExit = &pb.ExitStatus{SessionId: st.LastExit.SessionId, ExitCode: st.LastExit.ExitCode, Signal: st.LastExit.Signal, Error: st.LastExit.Error}
	}
	return c
}
