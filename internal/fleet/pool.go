package fleet

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/provider"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/wire"
)

// PoolConfig configures the warm pool: container sandboxes of the default app started
// ahead for no one, so that a user's new sandbox (or their live and dev sandboxes) is one
// already running, and sandboxes holding a runtime provider's template scaffolded with its
// dependencies resolved, so that a new project of that runtime takes them. A pooled
// sandbox is handed to one user only, once.
type PoolConfig struct {
	// Size is how many sandboxes the pool keeps started; 0 turns it off.
	Size int `yaml:"size"`
	// Templates is how many sandboxes to keep per provider's template ("node": 1), each
	// with the template scaffolded and its dependencies resolved.
	Templates map[string]int `yaml:"templates"`
	// Env is given to the commands that resolve the templates' dependencies (a
	// registry mirror: npm_config_registry=...).
	Env []string `yaml:"env"`
}

// Validate refuses a negative size, a template no provider has, and an environment entry
// that is not NAME=VALUE.
func (c PoolConfig) Validate() error {
	if c.Size < 0 {
		return fmt.Errorf("pool.size: %d is negative: %w", c.Size, errdefs.ErrInvalidArgument)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Templates)) {
		if _, err := provider.Lookup(name); err != nil {
			return fmt.Errorf("pool.templates: %w", err)
		}
		if n := c.Templates[name]; n < 0 {
			return fmt.Errorf("pool.templates.%s: %d is negative: %w", name, n, errdefs.ErrInvalidArgument)
		}
	}
	for i, kv := range c.Env {
		if !wire.ValidEnvEntry(kv) {
			return fmt.Errorf("pool.env: entry %d: want NAME=VALUE: %w", i, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// poolTemplate names the default app's pool in its metrics; a provider's template's pool
// is named by the provider's ID.
const poolTemplate = "default"

// poolNice is the priority the pool starts its sandboxes at: below users' work, which it
// must not slow. A claimed sandbox gets the usual priority back (runner.Claim).
const poolNice = 10

// refillGrace is how long the refill waits, after a member is taken, for the claimed
// sandbox's first command to end: a container started beside that command slows it far
// more than the refill's niced CPU share would say, and a claim is usually followed by a
// command at once.
const refillGrace = time.Second

// pool keeps sandboxes of the default app running, ready to be claimed.
type pool struct {
	f    *Fleet
	size int
	tmpl store.Sandbox
	// name labels the pool's metrics: poolTemplate, or a provider's ID.
	name string
	// prepare, when set, readies a started sandbox before it joins the pool (a
	// provider's template pool scaffolds its project there).
	prepare func(ctx context.Context, sb *runner.Sandbox) error

	mu   sync.Mutex
	idle []*runner.Sandbox
	// claimed are the refills put off until a taken member's first command ends (or
	// grace passes), by the member's ID.
	claimed map[string]*time.Timer
	grace   time.Duration

	wake chan struct{}
	done chan struct{}
	// started is set once run is; close waits for run only then.
	started atomic.Bool
	// stopped is closed when the refill loop has returned.
	stopped chan struct{}

	gauge  prometheus.Gauge
	claims *prometheus.CounterVec
}

func newPool(f *Fleet, name string, size int, reg prometheus.Registerer) (*pool, error) {
	tmpl, err := f.newRecord(Caller{}, api.CreateSandboxRequest{})
	if err != nil {
		return nil, err
	}
	if tmpl.Tier != string(wire.TierContainer) {
		key := "pool.size"
		if name != poolTemplate {
			key = "pool.templates." + name
		}
		return nil, fmt.Errorf("%s: the warm pool holds container sandboxes, and new sandboxes are of the %s tier: %w", key, tmpl.Tier, errdefs.ErrInvalidArgument)
	}
	p := &pool{
		f: f, size: size, tmpl: tmpl, name: name, claimed: map[string]*time.Timer{}, grace: refillGrace,
		wake: make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{}),
		gauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "paddock_pool_size", Help: "Sandboxes the warm pool holds ready to be claimed.",
			ConstLabels: prometheus.Labels{"template": name},
		}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paddock_pool_claims_total", Help: "New sandboxes that matched the warm pool's template, by result: hit (taken from the pool) or miss (started anew).",
			ConstLabels: prometheus.Labels{"template": name},
		}, []string{"result"}),
	}
	p.claims.WithLabelValues("hit")
	p.claims.WithLabelValues("miss")
	if reg != nil {
		for _, c := range []prometheus.Collector{p.gauge, p.claims} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

// matches says whether rec is what the pool's sandboxes are: the default app, tier,
// runtime and limits, and no environment of its own.
func (p *pool) matches(rec store.Sandbox) bool {
	t := p.tmpl
	return rec.Tier == t.Tier && rec.Runtime == t.Runtime &&
		limitsOf(rec) == limitsOf(t) && len(rec.Env) == 0 &&
		slices.Equal(rec.App.Command, t.App.Command) && rec.App.Port == t.App.Port && rec.App.Build == t.App.Build &&
		rec.App.Dir == t.App.Dir && rec.App.HotReload == t.App.HotReload
}

// take removes a live sandbox from the pool, or returns nil. A sandbox whose agent has
// exited is discarded, never handed out. The refill of a member taken waits for used
// (see refillGrace); otherwise it starts now.
func (p *pool) take() *runner.Sandbox {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.idle) > 0 {
		sb := p.idle[0]
		p.idle = p.idle[1:]
		p.gauge.Set(float64(len(p.idle)))
		if !exited(sb) {
			id := sb.ID
			p.claimed[id] = time.AfterFunc(p.grace, func() { p.used(id) })
			return sb
		}
		go p.discard(sb, "its agent exited while it was idle")
	}
	p.signal()
	return nil
}

// used starts the refill put off when member id was taken, if it has not started yet:
// the claimed sandbox's first command has ended, its claim failed, or the grace passed.
func (p *pool) used(id string) {
	p.mu.Lock()
	t, ok := p.claimed[id]
	delete(p.claimed, id)
	p.mu.Unlock()
	if ok {
		t.Stop()
		p.signal()
	}
}

func exited(sb *runner.Sandbox) bool {
	select {
	case <-sb.Exited():
		return true
	default:
		return false
	}
}

// signal asks the refill loop to look again.
func (p *pool) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// remove takes sb out of the pool; false if it was not there (claimed already).
func (p *pool) remove(sb *runner.Sandbox) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.Index(p.idle, sb)
	if i < 0 {
		return false
	}
	p.idle = slices.Delete(p.idle, i, i+1)
	p.gauge.Set(float64(len(p.idle)))
	return true
}

func (p *pool) discard(sb *runner.Sandbox, why string) {
	p.f.log.Warn("pool: discarding a sandbox", "sandbox", sb.ID, "template", p.name, "why", why)
	if err := p.f.run.Discard(context.Background(), sb); err != nil {
		p.f.log.Warn("pool: discard", "sandbox", sb.ID, "err", err)
	}
}

// run refills the pool, one sandbox at a time, until close. Its thread is niced, and what
// it starts (the runtime, the sandbox's processes) inherits that: filling the pool yields
// the CPU to users' work.
func (p *pool) run() {
	if p.started.Swap(true) {
		return
	}
	defer close(p.stopped)
	runtime.LockOSThread() // never unlocked: the thread ends with the loop, nice and all
	if err := unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), poolNice); err != nil {
		p.f.log.Warn("pool: cannot lower the refill's priority", "err", err)
	}
	backoff := time.Second
	for {
		for p.want() {
			if err := p.fill(); err != nil {
				if !p.want() {
					return // closing: the start was cancelled
				}
				p.f.log.Warn("pool: starting a sandbox failed; trying again later", "template", p.name, "err", err, "in", backoff)
				select {
				case <-p.done:
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, time.Minute)
				continue
			}
			backoff = time.Second
		}
		select {
		case <-p.done:
			return
		case <-p.wake:
		}
	}
}

func (p *pool) want() bool {
	select {
	case <-p.done:
		return false
	default:
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle) < p.size
}

// fill starts one sandbox and adds it to the pool once its app listens.
func (p *pool) fill() error {
	// One sandbox at a time across the pools: they share the refill's CPU budget.
	select {
	case p.f.poolFill <- struct{}{}:
	case <-p.done:
		return nil
	}
	defer func() { <-p.f.poolFill }()
	rec := p.tmpl
	rec.ID = runner.NewID()
	spec := p.f.spec(rec)
	spec.Pool, spec.User, spec.PoolSize = true, "", p.size
	if p.name != poolTemplate {
		spec.PoolTemplate = p.name
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	sb, err := p.f.run.Create(ctx, spec)
	if err != nil {
		return err
	}
	if err := waitApp(ctx, sb, rec.App.Port); err != nil {
		p.discard(sb, "its app did not listen: "+err.Error())
		return err
	}
	if p.prepare != nil {
		if err := p.prepare(ctx, sb); err != nil {
			p.discard(sb, "it could not be readied: "+err.Error())
			return err
		}
	}
	p.mu.Lock()
	select {
	case <-p.done:
		p.mu.Unlock()
		p.discard(sb, "the pool is closing")
		return nil
	default:
	}
	p.idle = append(p.idle, sb)
	p.gauge.Set(float64(len(p.idle)))
	p.mu.Unlock()
	go p.watch(sb)
	return nil
}

// watch discards sb if its agent exits while it is in the pool, and has it replaced.
func (p *pool) watch(sb *runner.Sandbox) {
	select {
	case <-sb.Exited():
	case <-p.done:
		return
	}
	if p.remove(sb) {
		p.discard(sb, "its agent exited while it was idle")
		p.signal()
	}
}

// drain discards every sandbox the pool holds and has it refilled.
func (p *pool) drain(why string) {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.gauge.Set(0)
	p.mu.Unlock()
	for _, sb := range idle {
		go p.discard(sb, why)
	}
	p.signal()
}

// close stops the refill and discards every sandbox the pool holds: they are no one's,
// and a restarted control plane does not adopt them.
func (p *pool) close() {
	select {
	case <-p.done:
		return
	default:
		close(p.done)
	}
	if p.started.Load() {
		<-p.stopped
	}
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.gauge.Set(0)
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, sb := range idle {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.f.run.Discard(context.Background(), sb); err != nil {
				p.f.log.Warn("pool: discard", "sandbox", sb.ID, "err", err)
			}
		}()
	}
	wg.Wait()
}

// fromPool starts rec from a pooled sandbox when it matches the pool and one is ready:
// the sandbox's ID becomes rec's, rec is recorded as running in one transaction (with
// more, when also is set: a role pointer), and the sandbox's files move into the user's
// tree. name, when set, names the sandbox after its ID. ok is false when rec must be
// started the usual way; then nothing was recorded.
func (f *Fleet) fromPool(ctx context.Context, c Caller, rec store.Sandbox, name func(id string) string, also func(*store.Tx, store.Sandbox) error) (_ store.Sandbox, ok bool, err error) {
	p := f.pool
	if p == nil || !p.matches(rec) || f.run.Claimable(runnerUser(rec.Username)) != nil {
		return rec, false, nil
	}
	sb := p.take()
	if sb == nil {
		p.claims.WithLabelValues("miss").Inc()
		return rec, false, nil
	}
	if name != nil {
		rec.Name = name(sb.ID)
	}
	rec.ID, rec.State = sb.ID, api.StateRunning
	unlock := f.lock(rec.ID)
	defer unlock()
	err = f.st.Update(ctx, func(tx *store.Tx) error {
		if err := f.checkQuota(ctx, tx, c, rec); err != nil {
			return err
		}
		if err := tx.CreateSandbox(ctx, rec); err != nil {
			return err
		}
		if also != nil {
			if err := also(tx, rec); err != nil {
				return err
			}
		}
		return tx.AppendAudit(ctx, f.event(c, "sandbox.create", rec.ID, map[string]any{"name": rec.Name, "tier": rec.Tier, "pool": true}))
	})
	if err != nil {
		p.used(sb.ID)
		go p.discard(sb, "its claim was not recorded: "+err.Error())
		return rec, true, err
	}
	if err := f.run.Claim(sb, runnerUser(rec.Username)); err != nil {
		p.used(sb.ID)
		// Recorded, so it is the user's now: started the usual way, under the same ID.
		p.claims.WithLabelValues("miss").Inc()
		f.log.Warn("pool: claim failed; starting the sandbox anew", "sandbox", rec.ID, "err", err)
		p.discard(sb, "its claim failed")
		rec, err = f.revive(ctx, c, rec)
		return rec, true, err
	}
	p.claims.WithLabelValues("hit").Inc()
	f.setRunning(rec, sb, false)
	f.log.Info("sandbox running", "sandbox", rec.ID, "user", rec.Username, "tier", sb.Tier, "pool", true)
	return rec, true, nil
}

// poolTemplates are the templates of the fleet's pools, "" for the default app's.
func (f *Fleet) poolTemplates() []string {
	var ts []string
	if f.pool != nil {
		ts = append(ts, "")
	}
	for _, p := range f.templates {
		ts = append(ts, p.name)
	}
	return ts
}
