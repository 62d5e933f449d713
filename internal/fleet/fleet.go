// Package fleet is the control plane's sandbox lifecycle: the records of every user's
// sandboxes in the store, the running sandboxes the runner made for them, the live and dev
// role pointers, promotion, quotas, and re-adoption after a restart.
//
// The store is the truth about what was asked for; the runner's sandboxes are what runs.
// A record is "running" only while the fleet holds a running sandbox for it. After a
// restart the fleet adopts what still runs and marks the rest "lost" (never silently
// recreated): the user decides to start or delete it. A failed or lost sandbox can always
// be deleted.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/runner/kubebackend"
	"github.com/paddockhq/paddock/internal/sandbox/agentclient"
	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// Runner is what the fleet needs of the runner.
type Runner interface {
	Create(ctx context.Context, spec runner.Spec) (*runner.Sandbox, error)
	Adopt(ctx context.Context, rec runner.Record) (*runner.Sandbox, error)
	Reap(ctx context.Context, rec runner.Record) error
	RemoveWorkspace(user, id string) error
	// The warm pool's (see pool.go and runner.Spec.Pool).
	Claimable(user string) error
	Claim(sb *runner.Sandbox, user string) error
	Discard(ctx context.Context, sb *runner.Sandbox) error
	ReapPool(ctx context.Context, runtime string, templates []string) error
	// HistoryDir is where a sandbox's history store is, and ForkHistory forks one.
	HistoryDir(user, id string) string
	HistoryOnHost() bool
	ForkHistory(ctx context.Context, src, dst, at, workspace string, uid, gid uint32, mode runner.ForkMode) (wire.ForkInfo, error)
	ExportHistory(ctx context.Context, dir string) (io.ReadCloser, error)
}

// Caller is who acts: a user, possibly an admin.
type Caller struct {
	UserID   string
	Username string
	Admin    bool
}

// Quota bounds what one user's sandboxes may take.
type Quota struct {
	// Sandboxes is the most sandboxes a user may have, the two standing ones included.
	Sandboxes int `yaml:"sandboxes"`
	// Memory is the most memory their limits may add up to.
	Memory wire.Size `yaml:"memory"`
}

// DefaultMemory is a new sandbox's memory limit when neither its request nor Config.Memory
// gives one.
const DefaultMemory = 512 << 20

// Config configures a Fleet.
type Config struct {
	// Tier and Runtime are the defaults for new sandboxes.
	Tier    wire.Tier
	Runtime string
	// Memory is a new sandbox's memory limit when its request gives none (quotas add
	// limits up, so every sandbox has one).
	Memory wire.Size
	Quota  Quota
	// App is what a sandbox runs when its request names no command: the welcome page.
	App store.App
	// Env is added to every sandbox's environment after its own ("K=V"): where the host's
	// services are, for one.
	Env []string
	// AgentKeys returns the capability keyring the agent of sandbox id gets in its
	// envelope (runner.Spec.CapabilityKeys); nil gives none.
	AgentKeys func(id string) string
	// Pool is the warm pool's configuration.
	Pool PoolConfig
	// Idle is idle suspend's configuration.
	Idle IdleConfig
	// Replica is this process's ID when several `paddock serve` replicas share the
	// database, empty when it is the only one. A replica starts and adopts only the
	// sandboxes it claimed (store.Tx.ClaimSandbox), and caches a user's roles only as
	// long as the notifications of their changes reach it (RolesChanged, Beat).
	Replica string
	// ReplicaTTL: a replica whose last heartbeat is older is dead.
	ReplicaTTL time.Duration
	// TakeOver lets a replica take over a dead replica's sandboxes (takeover.go): set
	// where every replica reaches every sandbox, on a cluster.
	TakeOver bool
}

// Fleet manages sandboxes. It is safe for concurrent use.
type Fleet struct {
	st  *store.Store
	run Runner
	cfg Config
	log *slog.Logger
	now func() time.Time
	m   *metrics

	mu      sync.Mutex
	running map[string]*runner.Sandbox // by sandbox ID
	recs    map[string]store.Sandbox   // records of running role owners, for Owner's fast path
	// starting holds the sandboxes start is still waiting on (their app not yet
	// listening): Owner's fast path skips them, so a proxied request that arrives then
	// queues on the sandbox's lock behind start instead of meeting a refused port.
	starting map[string]bool
	roles    map[string]store.Roles // by user ID; a cache of the store's roles
	// rolesEpoch moves with every change of roles applied to the cache, so that a read
	// of the store begun before one is not cached after it; rolesSeen is the last change
	// applied, rolesMark the last the store had at the previous heartbeat; beatAt is
	// this replica's last heartbeat recorded.
	rolesEpoch           uint64
	rolesSeen, rolesMark int64
	beatAt               time.Time
	locks                map[string]*sync.Mutex // one per sandbox ID and per "user:ID"

	// onGone and onSwap tell the proxy to drop connections (see SetHooks).
	onGone func(sandboxID string)
	onSwap func(userID string, generation int64)
	// onResync empties the other caches kept exact by the same notifications (see OnResync).
	onResync func()

	// serve starts the host's services for a running sandbox (see SetServices); stops
	// holds what ends them, by sandbox ID.
	serve func(rec store.Sandbox, sb *runner.Sandbox) (stop func())
	stops map[string]func()

	// closing ends the watches of running sandboxes' agents (see watch.go); backoff is
	// the first wait of each sandbox's last recovery.
	closing   chan struct{}
	closeOnce sync.Once
	backoff   map[string]time.Duration

	// pool is the warm pool, or nil.
	pool *pool
	// poolFill is held by the pool that is starting a sandbox: one at a time.
	poolFill chan struct{}
	// templates are the providers' templates' pools, by provider ID.
	templates map[string]*pool
	// poolServe serves the host's services a template pool's sandbox needs while it is
	// readied (egress, to resolve dependencies); nil serves none.
	poolServe func(sb *runner.Sandbox) (stop func())

	// used is when each running sandbox was last used (idle.go); busy says whether one is
	// in use all the same.
	used map[string]time.Time
	held map[string]int
	busy func(sandboxID string) bool
	// frozen holds the cgroups of the sandboxes idle freezing froze (idle.go).
	frozen map[string]*cgroups.Group

	// holders and replicas cache what Holder reads (replicas only).
	holders  map[string]string
	replicas map[string]replicaRead
	// sweeping is set while a Sweep runs: one at a time.
	sweeping atomic.Bool
}

// New returns a Fleet. Call Recover before serving.
func New(st *store.Store, run Runner, cfg Config, reg prometheus.Registerer, log *slog.Logger) (*Fleet, error) {
	if cfg.Memory == 0 {
		cfg.Memory = DefaultMemory
	}
	if cfg.Quota.Sandboxes == 0 {
		cfg.Quota.Sandboxes = 10
	}
	if cfg.Quota.Memory == 0 {
		cfg.Quota.Memory = 8 << 30
	}
	if len(cfg.App.Command) == 0 || cfg.App.Port == 0 {
		return nil, fmt.Errorf("fleet: no default app: %w", errdefs.ErrInvalidArgument)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	f := &Fleet{
		st: st, run: run, cfg: cfg, log: log, now: time.Now, m: m,
		running: map[string]*runner.Sandbox{}, recs: map[string]store.Sandbox{}, starting: map[string]bool{}, roles: map[string]store.Roles{}, locks: map[string]*sync.Mutex{},
		onGone: func(string) {}, onSwap: func(string, int64) {}, poolFill: make(chan struct{}, 1),
		serve: func(store.Sandbox, *runner.Sandbox) func() { return func() {} }, stops: map[string]func(){},
		closing: make(chan struct{}), backoff: map[string]time.Duration{}, used: map[string]time.Time{}, held: map[string]int{},
		frozen: map[string]*cgroups.Group{}, holders: map[string]string{}, replicas: map[string]replicaRead{},
	}
	if err := cfg.Idle.validate(); err != nil {
		return nil, err
	}
	if err := cfg.Pool.Validate(); err != nil {
		return nil, err
	}
	if cfg.Pool.Size > 0 {
		if f.pool, err = newPool(f, poolTemplate, cfg.Pool.Size, reg); err != nil {
			return nil, err
		}
	}
	if err := f.newTemplatePools(reg); err != nil {
		return nil, err
	}
	// The runner's own metrics: a cluster's warm pool.
	if rc, ok := run.(*runner.Runner); ok && reg != nil {
		for _, c := range kubebackend.Collectors(rc) {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return f, nil
}

// SetServices sets what the fleet calls when it starts holding a running sandbox (started,
// or adopted after a restart): serve starts the host's services for it (sb.Listen) and
// returns what stops them, which the fleet calls when it stops holding the sandbox.
func (f *Fleet) SetServices(serve func(rec store.Sandbox, sb *runner.Sandbox) (stop func())) {
	f.serve = serve
}

// SetHooks sets what the fleet calls when a sandbox stops serving (gone) and when a user's
// roles were swapped (swap). The proxy uses them to close WebSockets held by the old owner.
func (f *Fleet) SetHooks(gone func(sandboxID string), swap func(userID string, generation int64)) {
	f.onGone, f.onSwap = gone, swap
}

// lock serializes lifecycle operations on one key (a sandbox ID, or "user:" + a user ID).
func (f *Fleet) lock(key string) func() {
	f.mu.Lock()
	l, ok := f.locks[key]
	if !ok {
		l = &sync.Mutex{}
		f.locks[key] = l
	}
	f.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// Node is the cluster node sandbox id runs on; empty when it is not running or runs on
// this host.
func (f *Fleet) Node(id string) string {
	if sb := f.handle(id); sb != nil {
		return sb.Node
	}
	return ""
}

func (f *Fleet) handle(id string) *runner.Sandbox {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running[id]
}

// setRunning records that rec runs as sb: the handle and the record Owner's fast path
// serves, together. A starting sandbox stays off that path until started says so.
func (f *Fleet) setRunning(rec store.Sandbox, sb *runner.Sandbox, starting bool) {
	rec.State, rec.Error = api.StateRunning, ""
	stop := f.serve(rec, sb)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running[rec.ID], f.recs[rec.ID], f.stops[rec.ID] = sb, rec, stop
	f.touch(rec.ID)
	if starting {
		f.starting[rec.ID] = true
	}
	go f.watch(rec, sb)
}

// started puts sandbox id on Owner's fast path.
func (f *Fleet) started(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.starting, id)
}

// clearRunning forgets sandbox id's handle and record, and stops its services.
func (f *Fleet) clearRunning(id string) {
	f.mu.Lock()
	stop := f.stops[id]
	delete(f.running, id)
	delete(f.recs, id)
	delete(f.stops, id)
	delete(f.starting, id)
	delete(f.used, id)
	f.thaw(id) // a frozen sandbox's processes could not take the kill that stops it
	f.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// RunningRecord returns the record of sandbox id while the fleet holds it running.
func (f *Fleet) RunningRecord(id string) (store.Sandbox, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rec, ok := f.recs[id]
	return rec, ok
}

// acquire takes sandbox id's lock and returns its record if c may see it; the caller
// releases the lock with unlock, which is nil when err is not.
func (f *Fleet) acquire(ctx context.Context, c Caller, id string) (rec store.Sandbox, unlock func(), err error) {
	unlock = f.lock(id)
	if rec, err = f.Get(ctx, c, id); err != nil {
		unlock()
		return rec, nil, err
	}
	return rec, unlock, nil
}

// Get returns sandbox id if c may see it. Another user's sandbox is "not found", exactly
// as a missing one, so that IDs reveal nothing.
func (f *Fleet) Get(ctx context.Context, c Caller, id string) (store.Sandbox, error) {
	if !runner.ValidID(id) {
		return store.Sandbox{}, fmt.Errorf("sandbox ID %q: want sb- and 10 characters of a-z2-7: %w", id, errdefs.ErrInvalidArgument)
	}
	sb, err := f.st.SandboxByID(ctx, id)
	if err != nil || !(c.Admin || sb.UserID == c.UserID) {
		return store.Sandbox{}, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	return sb, nil
}

// List returns c's sandboxes, or everyone's when all is set and c is an admin.
func (f *Fleet) List(ctx context.Context, c Caller, all bool) ([]store.Sandbox, error) {
	if all && !c.Admin {
		return nil, fmt.Errorf("listing every user's sandboxes: only admins may: %w", errdefs.ErrPermissionDenied)
	}
	owner := c.UserID
	if all {
		owner = ""
	}
	return f.st.ListSandboxes(ctx, owner)
}

// Agent is the client of a running sandbox's agent, for exec and files.
func (f *Fleet) Agent(ctx context.Context, c Caller, id string) (*agentclient.Client, error) {
	h, err := f.Handle(ctx, c, id)
	if err != nil {
		return nil, err
	}
	return h.Agent(), nil
}

// Handle is a running sandbox, for exec: its channel, the limits it runs under and what
// they did (OOM kills, refused forks).
func (f *Fleet) Handle(ctx context.Context, c Caller, id string) (*runner.Sandbox, error) {
	if _, err := f.Get(ctx, c, id); err != nil {
		return nil, err
	}
	f.mu.Lock()
	h := f.running[id]
	f.touch(id)
	f.mu.Unlock()
	if h == nil {
		return nil, fmt.Errorf("sandbox %s is not running: start it first: %w", id, errdefs.ErrFailedPrecondition)
	}
	return h, nil
}

// Create records a new sandbox for c and starts it. A sandbox that fails to start is kept
// as "failed" with the reason, and the error is returned.
func (f *Fleet) Create(ctx context.Context, c Caller, req api.CreateSandboxRequest) (store.Sandbox, error) {
	rec, err := f.newRecord(c, req)
	if err != nil {
		return store.Sandbox{}, err
	}
	var name func(string) string
	if req.Name == "" {
		name = func(id string) string { return id }
	}
	if rec, ok, err := f.fromPool(ctx, c, rec, name, nil); ok {
		return rec, err
	}
	return f.createRecord(ctx, c, rec)
}

func (f *Fleet) createRecord(ctx context.Context, c Caller, rec store.Sandbox) (store.Sandbox, error) {
	err := f.st.Update(ctx, func(tx *store.Tx) error {
		if err := f.checkQuota(ctx, tx, c, rec); err != nil {
			return err
		}
		if err := tx.CreateSandbox(ctx, rec); err != nil {
			return err
		}
		return tx.AppendAudit(ctx, f.event(c, "sandbox.create", rec.ID, map[string]any{"name": rec.Name, "tier": rec.Tier}))
	})
	if err != nil {
		return store.Sandbox{}, err
	}
	unlock := f.lock(rec.ID)
	defer unlock()
	return f.start(ctx, c, rec)
}

func (f *Fleet) checkQuota(ctx context.Context, tx *store.Tx, c Caller, rec store.Sandbox) error {
	u, err := tx.UserUsage(ctx, rec.UserID)
	if err != nil {
		return err
	}
	q := f.cfg.Quota
	if u.Sandboxes+1 > q.Sandboxes {
		return fmt.Errorf("quota: %s has %d of %d sandboxes; delete one first: %w", c.Username, u.Sandboxes, q.Sandboxes, errdefs.ErrLimitExceeded)
	}
	if u.MemoryBytes+rec.MemoryBytes > int64(q.Memory) {
		return fmt.Errorf("quota: %s's sandboxes would take %s of memory, over the %s allowed: %w",
			c.Username, wire.Size(u.MemoryBytes+rec.MemoryBytes), q.Memory, errdefs.ErrLimitExceeded)
	}
	return nil
}

// start runs a recorded sandbox. The caller holds its lock.
func (f *Fleet) start(ctx context.Context, c Caller, rec store.Sandbox) (store.Sandbox, error) {
	return f.startSpec(ctx, c, rec, f.spec(rec))
}

// startSpec is start with the runner's request given.
func (f *Fleet) startSpec(ctx context.Context, c Caller, rec store.Sandbox, spec runner.Spec) (store.Sandbox, error) {
	if f.handle(rec.ID) != nil {
		rec.State, rec.Error = api.StateRunning, ""
		return rec, nil
	}
	if err := f.claim(ctx, rec.ID); err != nil {
		return rec, err
	}
	began := time.Now()
	sb, err := f.run.Create(ctx, spec)
	f.m.observeStart(rec.Tier, began, err)
	state, why := api.StateRunning, ""
	if err != nil {
		state, why = api.StateFailed, err.Error()
		f.log.Warn("sandbox failed to start", "sandbox", rec.ID, "user", rec.Username, "err", err)
	} else {
		f.setRunning(rec, sb, true)
		if werr := waitApp(ctx, sb, rec.App.Port); werr != nil {
			// It runs, and its agent answers: the app may come up later, or the user
			// fixes it with exec. Requests meanwhile get the proxy's 502.
			f.log.Warn("sandbox app not answering", "sandbox", rec.ID, "port", rec.App.Port, "err", werr)
		}
		f.started(rec.ID)
		f.log.Info("sandbox running", "sandbox", rec.ID, "user", rec.Username, "tier", sb.Tier, "took", time.Since(began))
	}
	if uerr := f.setState(ctx, c, rec.ID, "sandbox.start", state, why); uerr != nil {
		return rec, errors.Join(err, uerr)
	}
	rec.State, rec.Error = state, why
	return rec, err
}

// claim records that this replica runs sandbox id, unless another one holds it (a
// *store.HeldElsewhere). Without replicas there is nothing to claim.
func (f *Fleet) claim(ctx context.Context, id string) error {
	if f.cfg.Replica == "" {
		return nil
	}
	// A read first: another replica's sandbox costs no write transaction (the writer
	// lock is every replica's), and neither does one this replica holds already.
	rec, err := f.st.SandboxByID(ctx, id)
	if err != nil {
		return err
	}
	if err := f.Holder(ctx, id); err != nil || rec.Replica == f.cfg.Replica {
		return err
	}
	return f.st.Update(ctx, func(tx *store.Tx) error { return tx.ClaimSandbox(ctx, id, f.cfg.Replica, f.aliveSince()) })
}

// aliveSince is the oldest heartbeat of a replica still alive.
func (f *Fleet) aliveSince() time.Time { return f.now().Add(-f.cfg.ReplicaTTL) }

// Holder is nil when this replica may run sandbox id, else a *store.HeldElsewhere naming
// the replica that does. It is on the path of every request to a sandbox, so it answers
// from memory when it can: a sandbox's replica, once recorded, changes only by a takeover
// (which drops the entry where it is made, and finds the new holder where one is
// attempted), and a replica's row is read again after a fifth of the heartbeat TTL. With
// takeovers, a replica whose own heartbeat lapsed reads the record again: it may have
// lost the sandbox meanwhile.
func (f *Fleet) Holder(ctx context.Context, id string) error {
	if f.cfg.Replica == "" {
		return nil
	}
	f.mu.Lock()
	owner, ok := f.holders[id]
	ok = ok && (!f.cfg.TakeOver || f.rolesTrusted())
	f.mu.Unlock()
	if !ok {
		rec, err := f.st.SandboxByID(ctx, id)
		if err != nil {
			return err
		}
		if owner = rec.Replica; owner != "" {
			f.mu.Lock()
			f.holders[id] = owner
			f.mu.Unlock()
		}
	}
	if owner == "" || owner == f.cfg.Replica {
		return nil
	}
	f.mu.Lock()
	r, ok := f.replicas[owner]
	f.mu.Unlock()
	if !ok || f.now().Sub(r.read) > f.cfg.ReplicaTTL/5 {
		rep, err := f.st.ReplicaByID(ctx, owner)
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		r = replicaRead{Replica: rep, read: f.now()}
		f.mu.Lock()
		f.replicas[owner] = r
		f.mu.Unlock()
	}
	return &store.HeldElsewhere{SandboxID: id, Replica: r.Replica, Alive: r.HeartbeatAt.After(f.aliveSince())}
}

// replicaRead is a replica's row as read at read.
type replicaRead struct {
	store.Replica
	read time.Time
}

// Replica is this replica's ID, empty without replicas.
func (f *Fleet) Replica() string { return f.cfg.Replica }

// revive starts a recorded sandbox that is not running, after reaping what a lost or
// failed run left behind; a running one is left as it is. The caller holds its lock.
func (f *Fleet) revive(ctx context.Context, c Caller, rec store.Sandbox) (store.Sandbox, error) {
	if f.handle(rec.ID) == nil {
		if err := f.claim(ctx, rec.ID); err != nil {
			return rec, err
		}
		if err := f.run.Reap(ctx, f.record(rec)); err != nil {
			f.log.Warn("reap before start", "sandbox", rec.ID, "err", err)
		}
	}
	return f.start(ctx, c, rec)
}

// appWait bounds how long a start waits for the sandbox's app to accept connections.
const appWait = 15 * time.Second

// waitApp waits until the app accepts a connection on its port inside the sandbox, so that
// a sandbox reported running serves its first request rather than a 502. It gives up early
// when the app has exited before it listened (the agent is backing off before starting it
// again), or when the sandbox's agent has exited (the fleet's watch starts the sandbox
// again): a broken app should not hold its sandbox's start for appWait, and the error says
// how it ended.
func waitApp(ctx context.Context, sb *runner.Sandbox, port int) error {
	ctx, cancel := context.WithTimeout(ctx, appWait)
	defer cancel()
	agent := sb.Agent()
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		c, err := sb.DialPort(ctx, port)
		if err == nil {
			return c.Close()
		}
		if st, aerr := agent.App(ctx); aerr == nil && st.GetState() == appBackoff {
			return fmt.Errorf("the app exited before it listened on port %d (%s); the agent starts it again with backoff", port, exitText(st.GetLastExit()))
		}
		select {
		case <-ctx.Done():
			return err
		case <-sb.Exited():
			return fmt.Errorf("the sandbox's agent exited before the app listened on port %d", port)
		case <-time.After(delay):
		}
	}
}

// appBackoff is the state of a supervised app that exited and waits to start again.
const appBackoff = "backoff"

func exitText(e *pb.ExitStatus) string {
	switch {
	case e == nil:
		return "no exit status"
	case e.GetError() != "":
		return e.GetError()
	case e.GetSignal() != 0:
		return fmt.Sprintf("killed by signal %d", e.GetSignal())
	}
	return fmt.Sprintf("exit status %d", e.GetExitCode())
}

// Env is the environment a recorded sandbox's processes get: its own, then the server's.
func (f *Fleet) Env(rec store.Sandbox) []string {
	env := append([]string{}, rec.Env...)
	if rec.App.Build != "" {
		env = append(env, wire.AppBuildEnv+"="+rec.App.Build)
	}
	return append(env, f.cfg.Env...)
}

// spec is the runner's request for a recorded sandbox.
func (f *Fleet) spec(rec store.Sandbox) runner.Spec {
	env := f.Env(rec)
	return runner.Spec{
		ID: rec.ID, Persistent: true, User: runnerUser(rec.Username), Tier: wire.Tier(rec.Tier), Runtime: rec.Runtime,
		Limits: limitsOf(rec),
		Env:    env, Main: rec.App.Command,
		// The app is supervised: the agent restarts it when it exits, with backoff, so a
		// crash costs the user a moment of 502s, not their sandbox.
		RestartMain: true,
		MainDir:     rec.App.Dir, MainHotReload: rec.App.HotReload,
		CapabilityKeys: f.agentKeys(rec.ID),
	}
}

// limitsOf is a recorded sandbox's limits, as the runner takes them.
func limitsOf(rec store.Sandbox) wire.Limits {
	return wire.Limits{Memory: wire.Size(rec.MemoryBytes), CPUs: rec.CPUs, Pids: rec.Pids,
		Tmp: wire.Size(rec.TmpBytes), FileSize: wire.Size(rec.FileSizeBytes), Disk: wire.Size(rec.DiskBytes)}
}

func (f *Fleet) agentKeys(id string) string {
	if f.cfg.AgentKeys == nil {
		return ""
	}
	return f.cfg.AgentKeys(id)
}

func (f *Fleet) record(rec store.Sandbox) runner.Record {
	return runner.Record{
		ID: rec.ID, User: runnerUser(rec.Username), Tier: wire.Tier(rec.Tier), Runtime: rec.Runtime,
		Limits: limitsOf(rec),
	}
}

func (f *Fleet) setState(ctx context.Context, c Caller, id, action, state, why string) error {
	return f.st.Update(context.WithoutCancel(ctx), func(tx *store.Tx) error {
		if err := tx.SetSandboxState(ctx, id, state, why, f.now()); err != nil {
			return err
		}
		detail := map[string]any{"state": state}
		if why != "" {
			detail["error"] = why
		}
		return tx.AppendAudit(ctx, f.event(c, action, id, detail))
	})
}

func (f *Fleet) event(c Caller, action, target string, detail map[string]any) store.AuditEvent {
	return store.AuditEvent{At: f.now(), ActorUserID: c.UserID, Action: action, Target: target, Detail: detail}
}

// Start starts a stopped, failed or lost sandbox; a running one is left as it is.
func (f *Fleet) Start(ctx context.Context, c Caller, id string) (store.Sandbox, error) {
	rec, unlock, err := f.acquire(ctx, c, id)
	if err != nil {
		return rec, err
	}
	defer unlock()
	return f.revive(ctx, c, rec)
}

// Stop stops a sandbox and keeps its workspace.
func (f *Fleet) Stop(ctx context.Context, c Caller, id string) (store.Sandbox, error) {
	rec, unlock, err := f.acquire(ctx, c, id)
	if err != nil {
		return rec, err
	}
	defer unlock()
	if err := f.stop(ctx, id); err != nil {
		return rec, err
	}
	if err := f.setState(ctx, c, id, "sandbox.stop", api.StateStopped, ""); err != nil {
		return rec, err
	}
	rec.State, rec.Error = api.StateStopped, ""
	return rec, nil
}

// stop destroys the running sandbox, if any. The caller holds its lock.
func (f *Fleet) stop(ctx context.Context, id string) error {
	h := f.handle(id)
	if h == nil {
		return nil
	}
	f.clearRunning(id)
	f.onGone(id)
	if err := h.Destroy(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("stop sandbox %s: %w", id, err)
	}
	return nil
}

// Restart stops and starts a sandbox.
func (f *Fleet) Restart(ctx context.Context, c Caller, id string) (store.Sandbox, error) {
	rec, unlock, err := f.acquire(ctx, c, id)
	if err != nil {
		return rec, err
	}
	defer unlock()
	if err := f.stop(ctx, id); err != nil {
		return rec, err
	}
	return f.start(ctx, c, rec)
}

// Delete destroys a sandbox, whatever its state, with its workspace and its record. A role
// that pointed at it is empty afterwards; its next use makes a new sandbox.
func (f *Fleet) Delete(ctx context.Context, c Caller, id string) error {
	rec, unlock, err := f.acquire(ctx, c, id)
	if err != nil {
		return err
	}
	defer unlock()
	if err := f.stop(ctx, id); err != nil {
		f.log.Warn("delete: stop", "sandbox", id, "err", err)
	}
	var errs []error
	if err := f.run.Reap(ctx, f.record(rec)); err != nil {
		errs = append(errs, err)
	}
	if err := f.run.RemoveWorkspace(runnerUser(rec.Username), id); err != nil {
		errs = append(errs, fmt.Errorf("remove workspace: %w", err))
	}
	if len(errs) > 0 {
		// The record goes anyway, so that a stuck sandbox can always be deleted; what was
		// left behind is in the log for the operator.
		f.log.Warn("delete: leftovers", "sandbox", id, "err", errors.Join(errs...))
	}
	var seq int64
	err = f.st.Update(context.WithoutCancel(ctx), func(tx *store.Tx) error {
		roles, err := tx.RolesOf(ctx, rec.UserID)
		if err != nil {
			return err
		}
		if err := tx.DeleteSandbox(ctx, id); err != nil {
			return err
		}
		if roles.LiveID == id || roles.DevID == id {
			if seq, err = noteRoles(ctx, tx, rec.UserID, roles.Generation); err != nil {
				return err
			}
		}
		return tx.AppendAudit(ctx, f.event(c, "sandbox.delete", id, map[string]any{"name": rec.Name}))
	})
	if err != nil {
		return err
	}
	f.forgetRoles(rec.UserID)
	if seq != 0 {
		f.waitRolesApplied(ctx, seq)
	}
	return nil
}

// Recover runs once at start: every sandbox recorded as running (or creating) is adopted
// if it still runs, and marked lost otherwise, with what was left of it reaped.
func (f *Fleet) Recover(ctx context.Context) error {
	all, err := f.st.ListSandboxes(ctx, "")
	if err != nil {
		return err
	}
	var adopted, lost int
	for _, rec := range all {
		if rec.State != api.StateRunning && rec.State != api.StateCreating {
			continue
		}
		if f.cfg.Replica != "" && rec.Replica != f.cfg.Replica {
			// Another replica's, or of a time before replicas: adopted only if it runs here.
			if rec.Replica != "" {
				continue
			}
			if sb, err := f.run.Adopt(ctx, f.record(rec)); err == nil {
				if err := f.claim(ctx, rec.ID); err != nil {
					sb.Agent().Close()
					continue
				}
				f.setRunning(rec, sb, false)
				adopted++
			}
			continue
		}
		sys := Caller{UserID: ""}
		thawLeftFrozen(rec.ID)
		sb, err := f.run.Adopt(ctx, f.record(rec))
		if err == nil {
			f.setRunning(rec, sb, false)
			adopted++
			continue
		}
		lost++
		if rerr := f.run.Reap(ctx, f.record(rec)); rerr != nil {
			f.log.Warn("reap lost sandbox", "sandbox", rec.ID, "err", rerr)
		}
		why := "the control plane restarted and could not re-adopt it: " + err.Error() + "; start it again or delete it"
		if err := f.setState(ctx, sys, rec.ID, "sandbox.lost", api.StateLost, why); err != nil {
			return err
		}
	}
	f.log.Info("sandboxes recovered", "adopted", adopted, "lost", lost)
	// Also with no pool: on a cluster, the pools taken out of the configuration go.
	if err := f.run.ReapPool(ctx, f.cfg.Runtime, f.poolTemplates()); err != nil {
		f.log.Warn("pool: leftovers of an earlier run", "err", err)
	}
	if f.pool != nil {
		go f.pool.run()
	}
	for _, p := range f.templates {
		go p.run()
	}
	if f.cfg.Idle.enabled() {
		go f.suspendIdle()
	}
	return nil
}

// Close releases the channels to running sandboxes and leaves the sandboxes running, so
// that the next control plane adopts them.
func (f *Fleet) Close() {
	f.closeOnce.Do(func() { close(f.closing) })
	f.closePool()
	f.mu.Lock()
	stops := f.stops
	f.stops = map[string]func(){}
	f.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, sb := range f.running {
		f.thaw(id) // the next control plane does not know it froze them
		sb.Agent().Close()
		delete(f.running, id)
	}
}

// DestroyAll stops every running sandbox (tests, and an operator's full shutdown).
func (f *Fleet) DestroyAll(ctx context.Context) {
	f.closeOnce.Do(func() { close(f.closing) })
	f.closePool()
	f.mu.Lock()
	ids := make([]string, 0, len(f.running))
	for id := range f.running {
		ids = append(ids, id)
	}
	f.mu.Unlock()
	for _, id := range ids {
		unlock := f.lock(id)
		if err := f.stop(ctx, id); err != nil {
			f.log.Warn("destroy", "sandbox", id, "err", err)
		}
		unlock()
	}
}

// Running counts the sandboxes the fleet holds running.
func (f *Fleet) Running() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.running)
}

// DrainPool replaces the warm pool's sandboxes with new ones (after a key rotation: they
// were started with the old keys).
func (f *Fleet) DrainPool() {
	if f.pool != nil {
		f.pool.drain("the capability keyring changed")
	}
	for _, p := range f.templates {
		p.drain("the capability keyring changed")
	}
}

// closePool discards the warm pool's sandboxes, if there is a pool.
func (f *Fleet) closePool() {
	if f.pool != nil {
		f.pool.close()
	}
	for _, p := range f.templates {
		p.close()
	}
}
