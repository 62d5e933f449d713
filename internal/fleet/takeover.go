package fleet

import (
	"context"
	"errors"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/store"
)

// Where every replica reaches every sandbox (a cluster backend, Config.TakeOver), a dead
// replica's sandboxes are taken over by a live one: a compare-and-set of the sandbox's
// replica in the database (store.Tx.TakeOverSandbox: one replica wins, and none while the
// dead one beats again), then an adoption of what runs, as after a restart. A replica
// that was only paused finds, at its next heartbeat, the sandboxes it lost, and lets them
// go without stopping them (Release).

// Route is Holder, except that where sandboxes may be taken over a dead replica's sandbox
// is taken over first: the answer is then nil (this replica holds it now) or the
// *store.HeldElsewhere of the replica that does.
func (f *Fleet) Route(ctx context.Context, id string) error {
	err := f.Holder(ctx, id)
	var held *store.HeldElsewhere
	if !f.cfg.TakeOver || !errors.As(err, &held) || held.Alive {
		return err
	}
	return f.takeOver(ctx, id, held.Replica.ID)
}

// takeOver takes sandbox id from replica from, which is dead, and adopts it if it runs.
func (f *Fleet) takeOver(ctx context.Context, id, from string) error {
	unlock := f.lock(id)
	defer unlock()
	var won bool
	err := f.st.Update(ctx, func(tx *store.Tx) (err error) {
		won, err = tx.TakeOverSandbox(ctx, id, from, f.cfg.Replica, f.aliveSince())
		return err
	})
	if err != nil {
		return err
	}
	f.forgetHolder(id)
	if !won {
		// Another replica took it first, or its own came back: ask again.
		return f.Holder(ctx, id)
	}
	f.log.Info("took over a dead replica's sandbox", "sandbox", id, "from", from)
	rec, err := f.st.SandboxByID(ctx, id)
	if err != nil {
		return err
	}
	if (rec.State != api.StateRunning && rec.State != api.StateCreating) || f.handle(id) != nil {
		return nil
	}
	sb, err := f.run.Adopt(ctx, f.record(rec))
	if err != nil {
		why := "replica " + from + ", which ran it, died, and replica " + f.cfg.Replica + " could not adopt it: " + err.Error() + "; start it again or delete it"
		return f.setState(ctx, Caller{}, id, "sandbox.lost", api.StateLost, why)
	}
	f.setRunning(rec, sb, false)
	return nil
}

// forgetHolder drops the cached replica of sandbox id.
func (f *Fleet) forgetHolder(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.holders, id)
}

// Sweep runs after each heartbeat of a replica whose dead peers' sandboxes may be taken
// over: it lets go of the sandboxes another replica has taken from this one (it was
// paused past its heartbeat's TTL), then takes over the dead replicas' sandboxes. It
// returns at once and runs on its own goroutine, so that a slow adoption never holds a
// heartbeat back.
func (f *Fleet) Sweep(ctx context.Context) {
	if !f.cfg.TakeOver || !f.sweeping.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer f.sweeping.Store(false)
		if err := f.releaseLost(ctx); err != nil {
			f.log.Warn("sandboxes taken over by other replicas", "err", err)
		}
		orphans, err := f.st.Orphans(ctx, f.cfg.Replica, f.aliveSince())
		if err != nil {
			f.log.Warn("sandboxes of dead replicas", "err", err)
			return
		}
		for _, o := range orphans {
			if ctx.Err() != nil {
				return
			}
			if err := f.takeOver(ctx, o.SandboxID, o.Replica.ID); err != nil && !errors.As(err, new(*store.HeldElsewhere)) {
				f.log.Warn("take over a dead replica's sandbox", "sandbox", o.SandboxID, "from", o.Replica.ID, "err", err)
			}
		}
	}()
}

// releaseLost lets go, without stopping them, of the running sandboxes whose record now
// names another replica.
func (f *Fleet) releaseLost(ctx context.Context) error {
	mine, err := f.st.SandboxesOf(ctx, f.cfg.Replica)
	if err != nil {
		return err
	}
	f.mu.Lock()
	var gone []string
	for id := range f.running {
		if !mine[id] {
			gone = append(gone, id)
		}
	}
	f.mu.Unlock()
	for _, id := range gone {
		rec, err := f.st.SandboxByID(ctx, id)
		if err != nil || rec.Replica == "" || rec.Replica == f.cfg.Replica {
			continue // deleted meanwhile, or not another's
		}
		f.release(id, rec.Replica)
	}
	return nil
}

// release lets go of sandbox id, which replica to has taken over.
func (f *Fleet) release(id, to string) {
	unlock := f.lock(id)
	defer unlock()
	f.forgetHolder(id)
	sb := f.handle(id)
	if sb == nil {
		return
	}
	f.clearRunning(id)
	f.onGone(id)
	if err := sb.Release(); err != nil {
		f.log.Warn("let go of a sandbox", "sandbox", id, "err", err)
	}
	f.log.Warn("another replica took over this sandbox while this one was not heard from: let go of it, still running", "sandbox", id, "replica", to)
}
