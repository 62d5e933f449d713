package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/store"
)

// Owner is the sandbox that currently owns one of a user's roles.
type Owner struct {
	Sandbox store.Sandbox
	// Handle reaches the running sandbox: its agent's channel, its ports.
	Handle *runner.Sandbox
	// Generation counts the user's promotions; it changes with every swap.
	Generation int64
}

// Owner returns the running sandbox that owns c's role, making and starting it on first
// use. It is on the path of every proxied request: when the role's sandbox runs, it takes
// one map lookup under the fleet's mutex.
func (f *Fleet) Owner(ctx context.Context, c Caller, role string) (Owner, error) {
	if role != api.RoleLive && role != api.RoleDev {
		return Owner{}, fmt.Errorf("role %q: want live or dev: %w", role, errdefs.ErrInvalidArgument)
	}
	if o, ok := f.cachedOwner(c.UserID, role); ok {
		return o, nil
	}
	roles, err := f.ensureRoles(ctx, c)
	if err != nil {
		return Owner{}, err
	}
	id := roles.LiveID
	if role == api.RoleDev {
		id = roles.DevID
	}
	rec, err := f.ensureRunning(ctx, c, id)
	if err != nil {
		return Owner{}, f.wakeFailed(role, id, err)
	}
	f.mu.Lock()
	h := f.running[id]
	f.touch(id)
	f.mu.Unlock()
	if h == nil {
		return Owner{}, fmt.Errorf("the %s sandbox %s is %s: %s: %w", role, id, rec.State, rec.Error, errdefs.ErrUnavailable)
	}
	return Owner{Sandbox: rec, Handle: h, Generation: roles.Generation}, nil
}

// wakeFailed is what a request held for its role's sandbox to start answers when the
// start failed: unavailable (503, which the proxy sends with Retry-After), whatever refused
// it. A limit (the disk reserve, a quota) is a 429 elsewhere, but here the client asked
// for a page, not a sandbox, and should try again later. Errors that are not a start's
// (not found, another replica's) keep their class; one outside the taxonomy keeps its
// detail in the log.
func (f *Fleet) wakeFailed(role, id string, err error) error {
	for _, keep := range []error{errdefs.ErrUnavailable, errdefs.ErrNotFound, errdefs.ErrUnauthenticated, errdefs.ErrPermissionDenied} {
		if errors.Is(err, keep) {
			return err
		}
	}
	if !inTaxonomy(err) {
		f.log.Warn("the request's sandbox did not start", "sandbox", id, "role", role, "err", err)
		return fmt.Errorf("the %s sandbox %s could not start (the server log says why); try again later: %w", role, id, errdefs.ErrUnavailable)
	}
	why := strings.TrimPrefix(trimClass(err), "start sandbox "+id+": ")
	return fmt.Errorf("the %s sandbox %s could not start: %s; try again later: %w", role, id, why, errdefs.ErrUnavailable)
}

// wakeClasses are the classes a failed start can have that wakeFailed turns into
// unavailable.
var wakeClasses = []error{errdefs.ErrLimitExceeded, errdefs.ErrInvalidArgument, errdefs.ErrFailedPrecondition,
	errdefs.ErrDeadlineExceeded, errdefs.ErrAlreadyExists, errdefs.ErrDataLoss, errdefs.ErrStale}

func inTaxonomy(err error) bool {
	for _, c := range wakeClasses {
		if errors.Is(err, c) {
			return true
		}
	}
	return false
}

// trimClass is err's message without the class word %w left at its end.
func trimClass(err error) string {
	msg := err.Error()
	for _, c := range wakeClasses {
		if errors.Is(err, c) {
			msg = strings.TrimSuffix(msg, ": "+c.Error())
		}
	}
	return msg
}

func (f *Fleet) cachedOwner(userID, role string) (Owner, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.roles[userID]
	if !ok || !f.rolesTrusted() {
		return Owner{}, false
	}
	id := r.LiveID
	if role == api.RoleDev {
		id = r.DevID
	}
	h := f.running[id]
	if h == nil || f.starting[id] {
		return Owner{}, false
	}
	rec, ok := f.recs[id]
	if !ok {
		return Owner{}, false
	}
	f.touch(id)
	return Owner{Sandbox: rec, Handle: h, Generation: r.Generation}, true
}

// rolesOf returns userID's roles: the cached ones, else the store's, cached unless a
// change of roles was applied while they were read.
func (f *Fleet) rolesOf(ctx context.Context, userID string) (store.Roles, error) {
	f.mu.Lock()
	r, ok := f.roles[userID]
	ok = ok && f.rolesTrusted()
	epoch := f.rolesEpoch
	f.mu.Unlock()
	if ok {
		return r, nil
	}
	r, err := f.st.RolesOf(ctx, userID)
	if err != nil {
		return r, err
	}
	f.cacheRoles(r, epoch)
	return r, nil
}

// RolesOf returns userID's roles as the proxy routes by them (see rolesOf).
func (f *Fleet) RolesOf(ctx context.Context, userID string) (store.Roles, error) {
	return f.rolesOf(ctx, userID)
}

// cacheRoles caches r, read when the roles' epoch was epoch, unless a change of roles was
// applied since (the read may predate it) or a role is empty.
func (f *Fleet) cacheRoles(r store.Roles, epoch uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rolesEpoch != epoch || r.LiveID == "" || r.DevID == "" || !f.rolesTrusted() {
		return
	}
	if cached, ok := f.roles[r.UserID]; !ok || cached.Generation <= r.Generation {
		f.roles[r.UserID] = r
	}
}

// RolesChanged applies a change of userID's roles made anywhere (a promotion to
// generation, or a role's sandbox deleted), numbered seq: the cache forgets them, the
// proxy closes the WebSockets the old owners held, and a replica acknowledges seq in the
// store, which the change's maker waits for (waitRolesApplied).
func (f *Fleet) RolesChanged(ctx context.Context, userID string, generation, seq int64) {
	f.mu.Lock()
	f.rolesEpoch++
	delete(f.roles, userID)
	f.rolesSeen = max(f.rolesSeen, seq)
	f.mu.Unlock()
	f.onSwap(userID, generation)
	f.ackRoles(ctx, seq)
}

// ResyncRoles forgets every cached role after notifications may have been missed (the
// listener reconnected, or fell behind): it reads the last change's number first, so that
// what is read after the cache is emptied is at least as new, and then acknowledges it.
func (f *Fleet) ResyncRoles(ctx context.Context) {
	seq, seqErr := f.st.RolesSeq(ctx)
	all, allErr := f.st.AllRoles(ctx)
	f.mu.Lock()
	f.rolesEpoch++
	f.roles = map[string]store.Roles{}
	if seqErr == nil {
		f.rolesSeen = max(f.rolesSeen, seq)
	}
	f.mu.Unlock()
	if f.onResync != nil {
		f.onResync()
	}
	for _, r := range all {
		f.onSwap(r.UserID, r.Generation)
	}
	if err := errors.Join(seqErr, allErr); err != nil {
		f.log.Warn("roles: resync", "err", err)
		return
	}
	f.ackRoles(ctx, seq)
}

// Beat is told of each heartbeat this replica recorded, at. A replica whose heartbeat
// lapsed (it was paused, or could not write) may have been given up on by a change of
// roles that did not wait for it: it resyncs before it trusts its cache again. And if a
// change the store had at the previous heartbeat has still not been notified here, the
// listener is behind or stuck: it resyncs too.
func (f *Fleet) Beat(ctx context.Context, at time.Time) {
	seq, err := f.st.RolesSeq(ctx)
	f.mu.Lock()
	lapsed := at.Sub(f.beatAt) >= f.cfg.ReplicaTTL/2
	behind := err == nil && f.rolesSeen < f.rolesMark
	if err == nil {
		f.rolesMark = seq
	}
	f.mu.Unlock()
	if behind {
		f.log.Warn("roles: notifications are behind the store: resyncing the cache", "replica", f.cfg.Replica)
	}
	if lapsed || behind {
		f.ResyncRoles(ctx)
	}
	f.mu.Lock()
	if at.After(f.beatAt) {
		f.beatAt = at
	}
	f.mu.Unlock()
}

// rolesTrusted says whether the cached roles may be used: always for the only control
// plane; for a replica, while its heartbeat is recent (no change of roles gives up
// waiting for it). The caller holds f.mu.
func (f *Fleet) rolesTrusted() bool {
	return f.cfg.Replica == "" || f.now().Sub(f.beatAt) < f.cfg.ReplicaTTL/2
}

func (f *Fleet) ackRoles(ctx context.Context, seq int64) {
	if f.cfg.Replica == "" {
		return
	}
	if err := f.st.AckRoles(ctx, f.cfg.Replica, seq); err != nil {
		f.log.Warn("roles: acknowledge a change", "seq", seq, "err", err)
	}
}

// noteRoles numbers a change of userID's roles (now at generation) and notifies every
// replica of it when tx commits; the caller then waits for them (waitRolesApplied).
func noteRoles(ctx context.Context, tx *store.Tx, userID string, generation int64) (int64, error) {
	seq, err := tx.NextRolesSeq(ctx)
	if err != nil {
		return 0, err
	}
	return seq, tx.Notify(ctx, RolesChannel, fmt.Sprintf("%s %d %d", userID, generation, seq))
}

// waitRolesApplied returns once every other live replica has applied change seq, so that
// no request any of them serves after this returns uses roles from before it. A dead
// replica is not waited for once its heartbeat is older than the TTL; a live one whose
// notifications are stuck resyncs within two heartbeats (Beat).
func (f *Fleet) waitRolesApplied(ctx context.Context, seq int64) {
	if f.cfg.Replica == "" {
		return
	}
	deadline := f.now().Add(f.cfg.ReplicaTTL + f.cfg.ReplicaTTL/5)
	for delay := time.Millisecond; ; delay = min(2*delay, 20*time.Millisecond) {
		behind, err := f.st.RolesUnacked(ctx, f.cfg.Replica, seq, f.aliveSince())
		if err == nil && len(behind) == 0 {
			return
		}
		if f.now().After(deadline) || ctx.Err() != nil {
			f.log.Warn("roles: replicas did not acknowledge a change in time", "seq", seq, "replicas", behind, "err", err)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
	}
}

// RolesChannel is the store's notification channel of the changes every replica's caches
// apply: a change of roles, "USERID GENERATION SEQ", or another change, "KIND SUBJECT SEQ"
// (NoteChange). One channel and one numbering for all, so that one acknowledgement says
// that a replica applied every change up to it.
const RolesChannel = "paddock_roles"

// SessionsNote is the kind of a change notified when sessions of a user ended:
// "sessions USERID SEQ".
const SessionsNote = "sessions"

// NoteSessionsEnded notifies, when tx commits, that sessions of userID ended; it makes
// the fleet the auth service's cluster (auth.Cluster).
func (f *Fleet) NoteSessionsEnded(ctx context.Context, tx *store.Tx, userID string) (int64, error) {
	return NoteChange(ctx, tx, SessionsNote, userID)
}

// NoteChange numbers a change of kind for subject (say, a user's sessions ended) that
// every replica must apply to its caches, and notifies it when tx commits, as
// "KIND SUBJECT SEQ"; the caller then waits for it (WaitApplied).
func NoteChange(ctx context.Context, tx *store.Tx, kind, subject string) (int64, error) {
	seq, err := tx.NextRolesSeq(ctx)
	if err != nil {
		return 0, err
	}
	return seq, tx.Notify(ctx, RolesChannel, fmt.Sprintf("%s %s %d", kind, subject, seq))
}

// ChangeApplied records that this replica applied change seq, made with NoteChange, and
// acknowledges it in the store.
func (f *Fleet) ChangeApplied(ctx context.Context, seq int64) {
	f.mu.Lock()
	f.rolesSeen = max(f.rolesSeen, seq)
	f.mu.Unlock()
	f.ackRoles(ctx, seq)
}

// WaitApplied returns once every other live replica has applied change seq (see
// waitRolesApplied).
func (f *Fleet) WaitApplied(ctx context.Context, seq int64) { f.waitRolesApplied(ctx, seq) }

// CacheTrusted says whether caches kept exact by the notifications may be used now: not
// by a replica whose heartbeat lapsed, which a change may have given up waiting for.
func (f *Fleet) CacheTrusted() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rolesTrusted()
}

// OnResync sets what empties the other caches kept exact by the notifications: it is
// called whenever notifications may have been missed, before the resync acknowledges.
func (f *Fleet) OnResync(fn func()) { f.onResync = fn }

// Roles returns c's live and dev sandboxes, making them on first use (both started).
func (f *Fleet) Roles(ctx context.Context, c Caller) (live, dev store.Sandbox, generation int64, err error) {
	roles, err := f.ensureRoles(ctx, c)
	if err != nil {
		return live, dev, 0, err
	}
	if live, err = f.ensureRunning(ctx, c, roles.LiveID); err != nil && !heldAlive(err) {
		return live, dev, 0, err
	}
	if dev, err = f.ensureRunning(ctx, c, roles.DevID); err != nil && !heldAlive(err) {
		return live, dev, 0, err
	}
	return live, dev, roles.Generation, nil
}

// heldAlive reports an error saying that a live replica other than this one runs the
// sandbox: it is as good as running, seen from here.
func heldAlive(err error) bool {
	var held *store.HeldElsewhere
	return errors.As(err, &held) && held.Alive
}

// ensureRoles makes sure both of c's roles point at a sandbox, creating what is missing.
func (f *Fleet) ensureRoles(ctx context.Context, c Caller) (store.Roles, error) {
	if c.Username == "" {
		u, err := f.st.UserByID(ctx, c.UserID)
		if err != nil {
			return store.Roles{}, err
		}
		c.Username = u.Username
	}
	unlock := f.lock("user:" + c.UserID)
	defer unlock()
	f.mu.Lock()
	epoch := f.rolesEpoch
	f.mu.Unlock()
	roles, err := f.st.RolesOf(ctx, c.UserID)
	if err != nil {
		return roles, err
	}
	for _, role := range []string{api.RoleLive, api.RoleDev} {
		id := &roles.LiveID
		if role == api.RoleDev {
			id = &roles.DevID
		}
		if *id != "" {
			continue
		}
		rec, err := f.newRecord(c, api.CreateSandboxRequest{})
		if err != nil {
			return roles, err
		}
		rec.Name = role + "-" + rec.ID[3:8]
		setRole := func(tx *store.Tx, rec store.Sandbox) error { return tx.SetRole(ctx, c.UserID, role, rec.ID, f.now()) }
		name := func(id string) string { return role + "-" + id[3:8] }
		if pooled, ok, err := f.fromPool(ctx, c, rec, name, setRole); ok {
			if err != nil {
				return roles, fmt.Errorf("make the %s sandbox: %w", role, err)
			}
			*id = pooled.ID
			continue
		}
		err = f.st.Update(ctx, func(tx *store.Tx) error {
			if err := f.checkQuota(ctx, tx, c, rec); err != nil {
				return err
			}
			if err := tx.CreateSandbox(ctx, rec); err != nil {
				return err
			}
			if err := tx.SetRole(ctx, c.UserID, role, rec.ID, f.now()); err != nil {
				return err
			}
			return tx.AppendAudit(ctx, f.event(c, "sandbox.create", rec.ID, map[string]any{"name": rec.Name, "role": role}))
		})
		if err != nil {
			return roles, fmt.Errorf("make the %s sandbox: %w", role, err)
		}
		*id = rec.ID
	}
	f.cacheRoles(roles, epoch)
	return roles, nil
}

// ensureRunning starts sandbox id unless it runs, and returns its record.
func (f *Fleet) ensureRunning(ctx context.Context, c Caller, id string) (store.Sandbox, error) {
	unlock := f.lock(id)
	defer unlock()
	rec, err := f.st.SandboxByID(ctx, id)
	if err != nil {
		return rec, err
	}
	if rec, err = f.revive(ctx, c, rec); err != nil {
		return rec, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	return rec, nil
}

// Promote swaps c's live and dev pointers in one transaction: new requests go to the new
// owner at once, and the proxy closes WebSockets held by the old owners (see SetHooks).
// Both sandboxes are made and started first if needed, so a promotion never points a role
// at nothing.
func (f *Fleet) Promote(ctx context.Context, c Caller) (live, dev store.Sandbox, generation int64, err error) {
	if _, _, _, err := f.Roles(ctx, c); err != nil {
		return live, dev, 0, err
	}
	unlock := f.lock("user:" + c.UserID)
	defer unlock()
	var (
		roles store.Roles
		seq   int64
	)
	f.mu.Lock()
	epoch := f.rolesEpoch
	f.mu.Unlock()
	err = f.st.Update(ctx, func(tx *store.Tx) error {
		if roles, err = tx.SwapRoles(ctx, c.UserID, f.now()); err != nil {
			return err
		}
		if seq, err = noteRoles(ctx, tx, c.UserID, roles.Generation); err != nil {
			return err
		}
		return tx.AppendAudit(ctx, f.event(c, "roles.promote", c.UserID, map[string]any{
			"mode": api.PromoteSwap, "live": roles.LiveID, "dev": roles.DevID, "generation": roles.Generation,
		}))
	})
	if err != nil {
		return live, dev, 0, err
	}
	// A read of the roles begun before the swap must not be cached after it: the epoch
	// moves, and the swap's own result is cached unless another change came meanwhile.
	f.mu.Lock()
	f.rolesEpoch++
	if f.rolesEpoch == epoch+1 && f.rolesTrusted() {
		f.roles[c.UserID] = roles
	} else {
		delete(f.roles, c.UserID)
	}
	f.mu.Unlock()
	f.m.promotions.Inc()
	f.onSwap(c.UserID, roles.Generation)
	f.waitRolesApplied(ctx, seq)
	f.log.Info("promoted", "user", c.Username, "live", roles.LiveID, "dev", roles.DevID, "generation", roles.Generation)
	if live, err = f.st.SandboxByID(ctx, roles.LiveID); err != nil {
		return live, dev, 0, err
	}
	dev, err = f.st.SandboxByID(ctx, roles.DevID)
	return live, dev, roles.Generation, err
}

// forgetRoles drops the cached roles of a user (a role's sandbox was deleted).
func (f *Fleet) forgetRoles(userID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rolesEpoch++
	delete(f.roles, userID)
}

// RoleOf says which role, if any, sandbox id holds for its owner. It answers from the
// roles the proxy routes by, so the broker and the proxy never disagree about who is live.
func (f *Fleet) RoleOf(ctx context.Context, userID, id string) (string, error) {
	r, err := f.rolesOf(ctx, userID)
	if err != nil {
		return "", err
	}
	switch {
	case r.LiveID == id:
		return api.RoleLive, nil
	case r.DevID == id:
		return api.RoleDev, nil
	}
	return "", nil
}

// HasRoles reports whether userID's standing sandboxes were ever made: an account that
// has not yet asked for its app has none, and costs nothing.
func (f *Fleet) HasRoles(ctx context.Context, userID string) (bool, error) {
	if _, ok := f.cachedRoles(userID); ok {
		return true, nil
	}
	roles, err := f.st.RolesOf(ctx, userID)
	return roles.LiveID != "" || roles.DevID != "", err
}

func (f *Fleet) cachedRoles(userID string) (store.Roles, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.roles[userID]
	return r, ok
}

// SetApp makes t what sandbox id runs as its app (no command: the server's default), and
// restarts the sandbox on it when it runs; a stopped one runs it from its next start.
func (f *Fleet) SetApp(ctx context.Context, c Caller, id string, t api.Template) (store.Sandbox, error) {
	app, err := f.appOf(t)
	if err != nil {
		return store.Sandbox{}, err
	}
	rec, unlock, err := f.acquire(ctx, c, id)
	if err != nil {
		return rec, err
	}
	defer unlock()
	err = f.st.Update(ctx, func(tx *store.Tx) error {
		if err := tx.SetSandboxApp(ctx, id, app, f.now()); err != nil {
			return err
		}
		return tx.AppendAudit(ctx, f.event(c, "sandbox.app", id, map[string]any{"program": app.Command[0], "port": app.Port, "dir": app.Dir}))
	})
	if err != nil {
		return rec, fmt.Errorf("app of sandbox %s: %w", id, err)
	}
	rec.App = app
	if f.handle(id) == nil {
		return rec, nil
	}
	if err := f.stop(ctx, id); err != nil {
		return rec, err
	}
	return f.start(ctx, c, rec)
}
