package fleet

import (
	"context"
	"time"

	"github.com/paddockhq/paddock/internal/api"
)

// IdleConfig configures idle suspend: a role (live or dev) sandbox that nothing used for
// After is stopped with its workspace and history kept, and the next request through the
// proxy starts it again, held until its app listens (Owner).
type IdleConfig struct {
	// After is how long a role sandbox may go without a proxied request, an exec, a file
	// or history call or an open WebSocket before it is stopped; 0 never stops one.
	After time.Duration `yaml:"after"`
}

// touch records that sandbox id, running, was used now. The caller holds f.mu.
func (f *Fleet) touch(id string) {
	if _, ok := f.running[id]; ok && f.cfg.Idle.After > 0 {
		f.used[id] = f.now()
	}
}

// Hold marks sandbox id in use until release (a running exec, an open shell): idle
// suspend leaves it alone meanwhile.
func (f *Fleet) Hold(id string) (release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held[id]++
	f.touch(id)
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.held[id]--; f.held[id] <= 0 {
			delete(f.held, id)
		}
		f.touch(id)
	}
}

// SetBusy sets what says a sandbox is in use though no call came for a while (open
// WebSockets through the proxy).
func (f *Fleet) SetBusy(busy func(sandboxID string) bool) { f.busy = busy }

// suspendIdle stops, every tick, the running role sandboxes idle for longer than
// IdleConfig.After, until the fleet closes.
func (f *Fleet) suspendIdle() {
	after := f.cfg.Idle.After
	tick := time.NewTicker(min(max(after/4, 10*time.Millisecond), time.Minute))
	defer tick.Stop()
	for {
		select {
		case <-f.closing:
			return
		case <-tick.C:
		}
		for _, id := range f.idleRoles(after) {
			f.suspend(id, after)
		}
	}
}

// idleRoles lists the running role sandboxes nothing used for after.
func (f *Fleet) idleRoles(after time.Duration) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	roles := map[string]bool{}
	for _, r := range f.roles {
		roles[r.LiveID], roles[r.DevID] = true, true
	}
	var idle []string
	now := f.now()
	for id := range f.running {
		used, ok := f.used[id]
		if !ok {
			f.used[id] = now // first seen: the clock starts now
			continue
		}
		if roles[id] && !f.starting[id] && now.Sub(used) >= after {
			idle = append(idle, id)
		}
	}
	return idle
}

// suspend stops role sandbox id unless it was used since it was found idle, or is busy.
func (f *Fleet) suspend(id string, after time.Duration) {
	unlock := f.lock(id)
	defer unlock()
	f.mu.Lock()
	used, running, held := f.used[id], f.running[id] != nil, f.held[id] > 0
	f.mu.Unlock()
	if !running || held || f.now().Sub(used) < after || (f.busy != nil && f.busy(id)) {
		return
	}
	ctx := context.Background()
	if err := f.stop(ctx, id); err != nil {
		f.log.Warn("idle suspend", "sandbox", id, "err", err)
		return
	}
	if err := f.setState(ctx, Caller{}, id, "sandbox.suspend", api.StateStopped, ""); err != nil {
		f.log.Warn("idle suspend: record", "sandbox", id, "err", err)
	}
	f.mu.Lock()
	delete(f.used, id)
	f.mu.Unlock()
	f.log.Info("sandbox suspended", "sandbox", id, "idle", after)
}
