package fleet

import (
	"context"
	"errors"
	"fmt"

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
	if f.cfg.Replica != "" {
		// Another replica may have promoted: the store says who owns the role now.
		if err := f.freshRoles(ctx, c.UserID); err != nil {
			return Owner{}, err
		}
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
		return Owner{}, err
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

func (f *Fleet) cachedOwner(userID, role string) (Owner, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.roles[userID]
	if !ok {
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

// freshRoles reads userID's roles from the store into the cache. A generation newer than
// the cached one is a promotion made elsewhere: the proxy hears of it as of one made here.
func (f *Fleet) freshRoles(ctx context.Context, userID string) error {
	roles, err := f.st.RolesOf(ctx, userID)
	if err != nil {
		return err
	}
	f.mu.Lock()
	cached, ok := f.roles[userID]
	swapped := ok && cached.Generation < roles.Generation
	if roles.LiveID == "" || roles.DevID == "" {
		delete(f.roles, userID)
	} else if !ok || cached.Generation <= roles.Generation {
		f.roles[userID] = roles
	}
	f.mu.Unlock()
	if swapped {
		f.onSwap(userID, roles.Generation)
	}
	return nil
}

// RolesChanged is told that userID's roles changed elsewhere (another replica promoted,
// to generation): the cache forgets them and the proxy closes the WebSockets the old
// owners held. A generation of -1 means that any user's may have changed.
func (f *Fleet) RolesChanged(userID string, generation int64) {
	f.mu.Lock()
	if generation < 0 {
		f.roles = map[string]store.Roles{}
	} else if r, ok := f.roles[userID]; ok && r.Generation < generation {
		delete(f.roles, userID)
	}
	f.mu.Unlock()
	if generation >= 0 {
		f.onSwap(userID, generation)
	}
}

// RolesChannel is the store's notification channel of promotions: "USERID GENERATION".
const RolesChannel = "paddock_roles"

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
	f.mu.Lock()
	if cached, ok := f.roles[c.UserID]; !ok || cached.Generation <= roles.Generation {
		f.roles[c.UserID] = roles
	}
	f.mu.Unlock()
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
	var roles store.Roles
	err = f.st.Update(ctx, func(tx *store.Tx) error {
		if roles, err = tx.SwapRoles(ctx, c.UserID, f.now()); err != nil {
			return err
		}
		if err := tx.Notify(ctx, RolesChannel, fmt.Sprintf("%s %d", c.UserID, roles.Generation)); err != nil {
			return err
		}
		return tx.AppendAudit(ctx, f.event(c, "roles.promote", c.UserID, map[string]any{
			"live": roles.LiveID, "dev": roles.DevID, "generation": roles.Generation,
		}))
	})
	if err != nil {
		return live, dev, 0, err
	}
	f.mu.Lock()
	f.roles[c.UserID] = roles
	f.mu.Unlock()
	f.m.promotions.Inc()
	f.onSwap(c.UserID, roles.Generation)
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
	delete(f.roles, userID)
}

// RoleOf says which role, if any, sandbox id holds for its owner. It answers from the
// roles the proxy routes by (kept by ensureRoles and Promote, under the same lock), so the
// broker and the proxy never disagree about who is live; it reads the store only for a
// user not cached yet. (Reading the store on every call was a tenth of the control plane's
// CPU under the broker's load benchmark.)
func (f *Fleet) RoleOf(ctx context.Context, userID, id string) (string, error) {
	f.mu.Lock()
	r, ok := f.roles[userID]
	f.mu.Unlock()
	if !ok || f.cfg.Replica != "" {
		var err error
		if r, err = f.st.RolesOf(ctx, userID); err != nil {
			return "", err
		}
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
