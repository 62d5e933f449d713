package fleet

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/store"
)

// A sandbox whose agent is gone (the memory limit killed it, it crashed) answers nothing:
// the fleet watches each running sandbox's agent, and when it exits without a stop, says
// so (state failed, the reason, a sandbox.agent_exited event) and starts the sandbox again
// by itself, with backoff, until it runs or restartTries have failed.
const (
	restartFirst = time.Second
	restartMax   = 30 * time.Second
	restartTries = 6
	// stableAfter: an agent that ran this long before it exited was not crash-looping,
	// and its sandbox's recovery starts again from restartFirst.
	stableAfter = time.Minute
)

// firstDelay is the wait before the first restart of a recovery, given the last one's
// (0: none yet) and how long the agent ran: an agent that keeps dying soon after it
// starts waits twice as long each time, up to restartMax.
func firstDelay(last, lived time.Duration) time.Duration {
	if last == 0 || lived >= stableAfter {
		return restartFirst
	}
	return min(2*last, restartMax)
}

// watch waits for the agent of sb, which runs rec, to exit, and recovers the sandbox if it
// was not stopped on purpose.
func (f *Fleet) watch(rec store.Sandbox, sb *runner.Sandbox) {
	exited := sb.Exited()
	if exited == nil {
		return
	}
	began := time.Now()
	select {
	case <-exited:
	case <-f.closing:
		return
	}
	if !f.agentExited(rec, sb) {
		return
	}
	f.mu.Lock()
	delay := firstDelay(f.backoff[rec.ID], time.Since(began))
	f.backoff[rec.ID] = delay
	f.mu.Unlock()
	f.restart(rec.ID, delay)
}

// agentExited records that sb's agent exited, if sb is still the sandbox's running handle
// (a stop, restart or delete clears it first), and tears down what is left. It reports
// whether it did.
func (f *Fleet) agentExited(rec store.Sandbox, sb *runner.Sandbox) bool {
	unlock := f.lock(rec.ID)
	defer unlock()
	if f.handle(rec.ID) != sb {
		return false
	}
	why := "the sandbox's agent exited"
	if n, err := sb.OOMKills(); err == nil && n > 0 {
		why += fmt.Sprintf(" after the memory limit killed %d process(es)", n)
	}
	if last := sb.LastError(); last != "" && !strings.Contains(last, "no error") {
		why += " (" + last + ")"
	}
	why += "; paddock is starting it again"
	f.log.Warn("sandbox agent exited", "sandbox", rec.ID, "user", rec.Username, "why", why)
	f.clearRunning(rec.ID)
	f.onGone(rec.ID)
	ctx := context.Background()
	if err := sb.Destroy(ctx); err != nil {
		f.log.Warn("tear down a sandbox whose agent exited", "sandbox", rec.ID, "err", err)
	}
	if err := f.setState(ctx, Caller{UserID: rec.UserID}, rec.ID, "sandbox.agent_exited", api.StateFailed, why); err != nil {
		f.log.Warn("record a sandbox whose agent exited", "sandbox", rec.ID, "err", err)
	}
	return true
}

// restart starts sandbox id again with backoff, while it stays failed (a user who stops,
// starts or deletes it meanwhile takes over).
func (f *Fleet) restart(id string, delay time.Duration) {
	for try := 1; try <= restartTries; try++ {
		select {
		case <-time.After(delay):
		case <-f.closing:
			return
		}
		delay = min(2*delay, restartMax)
		done, err := f.restartOnce(id)
		if done {
			return
		}
		f.log.Warn("restart of a sandbox whose agent exited failed", "sandbox", id, "try", try, "err", err)
	}
}

// restartOnce starts sandbox id if it is still failed and not running; done is true when
// there is nothing more to do.
func (f *Fleet) restartOnce(id string) (done bool, err error) {
	unlock := f.lock(id)
	defer unlock()
	rec, err := f.st.SandboxByID(context.Background(), id)
	if err != nil || rec.State != api.StateFailed || f.handle(id) != nil {
		return true, nil
	}
	// The owner's sandbox, started again for them: the events are theirs to see.
	_, err = f.revive(context.Background(), Caller{UserID: rec.UserID}, rec)
	return err == nil, err
}
