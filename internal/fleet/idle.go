package fleet

import (
	"context"
	"fmt"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// IdleConfig configures idle suspend: a role (live or dev) sandbox that nothing used for
// FreezeAfter is frozen (its processes stopped where they are, their memory kept), and one
// unused for After is stopped with its workspace and history kept. The next request
// through the proxy thaws a frozen one at once, or starts a stopped one again, held until
// its app listens (Owner).
type IdleConfig struct {
	// After is how long a role sandbox may go without a proxied request, an exec, a file
	// or history call or an open WebSocket before it is stopped; 0 never stops one.
	After time.Duration `yaml:"after"`
	// FreezeAfter is how long it may go unused before it is frozen (the cgroup freezer),
	// shorter than After; 0 never freezes one.
	FreezeAfter time.Duration `yaml:"freeze_after"`
}

// validate refuses a negative duration, and a freeze that After's stop would always come
// before.
func (c IdleConfig) validate() error {
	switch {
	case c.After < 0:
		return fmt.Errorf("idle.after: %s is negative: %w", c.After, errdefs.ErrInvalidArgument)
	case c.FreezeAfter < 0:
		return fmt.Errorf("idle.freeze_after: %s is negative: %w", c.FreezeAfter, errdefs.ErrInvalidArgument)
	case c.FreezeAfter > 0 && c.After > 0 && c.FreezeAfter >= c.After:
		return fmt.Errorf("idle.freeze_after: %s is not shorter than idle.after (%s), so nothing would ever be frozen: %w", c.FreezeAfter, c.After, errdefs.ErrInvalidArgument)
	}
	return nil
}

func (c IdleConfig) enabled() bool { return c.After > 0 || c.FreezeAfter > 0 }

// touch records that sandbox id, running, was used now, and thaws it if it is frozen.
// The caller holds f.mu.
func (f *Fleet) touch(id string) {
	if _, ok := f.running[id]; ok && f.cfg.Idle.enabled() {
		f.used[id] = f.now()
	}
	f.thaw(id)
}

// thaw lets frozen sandbox id run again. The caller holds f.mu.
func (f *Fleet) thaw(id string) {
	g, ok := f.frozen[id]
	if !ok {
		return
	}
	delete(f.frozen, id)
	if err := g.Thaw(); err != nil {
		f.log.Warn("idle: thaw", "sandbox", id, "err", err)
		return
	}
	f.log.Info("sandbox thawed", "sandbox", id)
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
		if f.held[id]--; f.held[id] <= 0 {
			delete(f.held, id)
		}
		f.touch(id)
		f.mu.Unlock()
		if f.pool != nil {
			f.pool.used(id) // a claimed sandbox's first command has ended: refill now
		}
	}
}

// SetBusy sets what says a sandbox is in use though no call came for a while (open
// WebSockets through the proxy).
func (f *Fleet) SetBusy(busy func(sandboxID string) bool) { f.busy = busy }

// suspendIdle stops, every tick, the running role sandboxes idle for longer than
// IdleConfig.After, and freezes those idle for longer than FreezeAfter, until the fleet
// closes.
func (f *Fleet) suspendIdle() {
	after, freezeAfter := f.cfg.Idle.After, f.cfg.Idle.FreezeAfter
	first := after
	if first == 0 || (freezeAfter > 0 && freezeAfter < first) {
		first = freezeAfter
	}
	tick := time.NewTicker(min(max(first/4, 10*time.Millisecond), time.Minute))
	defer tick.Stop()
	for {
		select {
		case <-f.closing:
			return
		case <-tick.C:
		}
		if after > 0 {
			for _, id := range f.idleRoles(after) {
				f.suspend(id, after)
			}
		}
		if freezeAfter > 0 {
			for _, id := range f.idleRoles(freezeAfter) {
				f.freeze(id, freezeAfter)
			}
		}
	}
}

// freezeWait bounds the wait for the kernel to freeze a sandbox; one that does not freeze
// by then is thawed again and left running.
const freezeWait = 5 * time.Second

// freeze freezes role sandbox id's cgroup unless it was used since it was found idle, is
// busy, or is frozen already. A use meanwhile (touch) thaws it again.
func (f *Fleet) freeze(id string, after time.Duration) {
	f.mu.Lock()
	sb, used, held := f.running[id], f.used[id], f.held[id] > 0
	_, frozen := f.frozen[id]
	f.mu.Unlock()
	if sb == nil || frozen || held || f.now().Sub(used) < after || (f.busy != nil && f.busy(id)) {
		return
	}
	g, err := cgroups.Load(sb.Cgroup())
	if err != nil {
		f.log.Warn("idle freeze", "sandbox", id, "err", err)
		return
	}
	f.mu.Lock()
	if f.running[id] != sb || f.now().Sub(f.used[id]) < after {
		f.mu.Unlock()
		return
	}
	f.frozen[id] = g
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), freezeWait)
	defer cancel()
	err = g.Freeze(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.closing: // Close thawed what it found; this one froze after
		delete(f.frozen, id)
	default:
	}
	if _, still := f.frozen[id]; !still {
		// Used while it froze: the touch thawed it, possibly before the freeze was written.
		if err := g.Thaw(); err != nil {
			f.log.Warn("idle: thaw", "sandbox", id, "err", err)
		}
		return
	}
	if err != nil {
		delete(f.frozen, id)
		f.log.Warn("idle freeze", "sandbox", id, "err", err)
		return
	}
	f.log.Info("sandbox frozen", "sandbox", id, "idle", after)
}

// thawLeftFrozen thaws sandbox id's cgroup if an earlier control plane, which died
// without thawing it, left it frozen: its agent could not answer the adoption.
func thawLeftFrozen(id string) {
	g, err := cgroups.Load("/paddock/" + id)
	if err != nil {
		return
	}
	_ = g.Thaw() // best effort: the adoption says what is wrong if it stays frozen
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
