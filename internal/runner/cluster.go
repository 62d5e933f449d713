package runner

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/sandbox/agentclient"
	"github.com/paddockhq/paddock/internal/sandbox/kubespec"
	"github.com/paddockhq/paddock/internal/wire"
)

// BackendKubernetes runs sandboxes on a Kubernetes cluster (ClusterConfig).
const BackendKubernetes = "kubernetes"

// ClusterConfig is where sandboxes run: on this host (backend empty or "local"), or on
// a Kubernetes cluster through the agent-sandbox CRDs (backend "kubernetes", with the
// fields of kubespec.Config; docs/kubernetes.md).
type ClusterConfig struct {
	// Backend is "local" (default) or "kubernetes".
	Backend         string `yaml:"backend"`
	kubespec.Config `yaml:",inline"`
}

// Cluster is a Kubernetes cluster as the runner uses it: package kube's, which a binary
// links by importing package runner/kubebackend. The CLI does not, so that `paddock run`
// does not link client-go; the control plane does.
type Cluster interface {
	Namespace() string
	Health(ctx context.Context) error
	EnsurePool(ctx context.Context, limits wire.Limits) error
	// StartWarm starts req, claiming a warm pod when one fits; hit says it did.
	StartWarm(ctx context.Context, req kubespec.Request, persistent bool) (sb ClusterSandbox, hit bool, err error)
	Remove(ctx context.Context, id string) error
	// Adopt takes up sandbox id, started by another control plane and running still.
	Adopt(ctx context.Context, id string, persistent bool) (ClusterSandbox, error)
	// EnsureTemplatePool makes or rewrites a provider template's pool of size pods.
	EnsureTemplatePool(ctx context.Context, template string, size int, limits wire.Limits) error
	// StartTemplate starts req as a member of template's pool; hit says it was claimed.
	StartTemplate(ctx context.Context, template string, req kubespec.Request) (sb ClusterSandbox, hit bool, err error)
	// ReapTemplateMembers deletes the template pools' members an earlier control plane left.
	ReapTemplateMembers(ctx context.Context) error
	// PruneTemplatePools deletes the template pools not in templates ("": the default app's).
	PruneTemplatePools(ctx context.Context, templates []string) error
}

// ClusterSandbox is a sandbox running on a cluster.
type ClusterSandbox interface {
	backend
	// NodeName is the node its pod runs on.
	NodeName() string
	// Adopt makes a member of the default app's pool its user's sandbox (Claim).
	Adopt(ctx context.Context) error
}

// ClusterOpener opens the cluster cfg names.
type ClusterOpener func(cfg kubespec.Config, log *slog.Logger) (Cluster, error)

var (
	openerMu sync.Mutex
	opener   ClusterOpener
)

// RegisterCluster makes open how runners open their cluster (package runner/kubebackend
// calls it when it is linked).
func RegisterCluster(open ClusterOpener) {
	openerMu.Lock()
	defer openerMu.Unlock()
	opener = open
}

// ClusterLinked reports whether this program links the Kubernetes backend.
func ClusterLinked() bool {
	openerMu.Lock()
	defer openerMu.Unlock()
	return opener != nil
}

// errNoClusterBackend is a cluster configuration in a binary without the backend.
var errNoClusterBackend = fmt.Errorf("runner backend kubernetes: this program does not link the Kubernetes backend (paddock-server does): %w", errdefs.ErrUnavailable)

// OnCluster says whether sandboxes run on a Kubernetes cluster.
func (c Config) OnCluster() bool { return c.Cluster.Backend == BackendKubernetes }

func (c *Config) fillCluster() {
	if c.OnCluster() {
		c.Cluster.Fill(c.DataDir)
	}
}

func (c *Config) validateCluster() error {
	switch c.Cluster.Backend {
	case "", "local":
		return nil
	case BackendKubernetes:
		if err := c.Cluster.Validate(); err != nil {
			return err
		}
		return c.validatePools()
	}
	return invalidField("runner.backend", "%q: want local or kubernetes", c.Cluster.Backend)
}

// validatePools refuses two warm pools of one key, and a pool whose limits no sandbox may
// have (over max_limits, or a tmp over its memory).
func (c *Config) validatePools() error {
	if _, err := c.Cluster.WarmPool.PoolKeys(c.Limits); err != nil {
		return err
	}
	for i, p := range c.Cluster.WarmPool.Pools {
		l := p.Limits(c.Limits)
		if err := l.Over(c.MaxLimits); err != nil {
			return fmt.Errorf("runner.warm_pool.pools[%d]: %w", i, err)
		}
		if err := l.CheckTmp(); err != nil {
			return fmt.Errorf("runner.warm_pool.pools[%d]: %w", i, err)
		}
	}
	return nil
}

// cluster opens the cluster on first use.
func (r *Runner) cluster() (Cluster, error) {
	r.clusterMu.Lock()
	defer r.clusterMu.Unlock()
	if r.kube == nil {
		openerMu.Lock()
		open := opener
		openerMu.Unlock()
		if open == nil {
			return nil, errNoClusterBackend
		}
		cfg := r.cfg.Cluster.Config
		cfg.Fill(r.cfg.DataDir) // a configuration built in code may not have been
		cfg.SandboxUID = r.cfg.SandboxUID
		c, err := open(cfg, r.log)
		if err != nil {
			return nil, err
		}
		r.kube = c
		// Also with no pool configured: the pools taken out of the configuration go.
		go r.ensurePool(c)
	}
	return r.kube, nil
}

// ensurePool makes the cluster's warm pools, limits left out being the runner's defaults,
// and deletes those no longer configured; a create tries again when this could not (the
// pool then misses).
func (r *Runner) ensurePool(c Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.EnsurePool(ctx, r.cfg.Limits); err != nil {
		r.log.Warn("warm pool", "err", err)
	}
}

// ClusterConfig is where r's sandboxes run.
func (r *Runner) ClusterConfig() ClusterConfig { return r.cfg.Cluster }

// Cluster is the cluster sandboxes run on, opened on first use.
func (r *Runner) Cluster() (Cluster, error) { return r.cluster() }

// Health reports whether the runner can start sandboxes: on a cluster, whether its API
// server answers; on this host, always.
func (r *Runner) Health(ctx context.Context) error {
	if !r.cfg.OnCluster() {
		return nil
	}
	c, err := r.cluster()
	if err != nil {
		return err
	}
	return c.Health(ctx)
}

// createOnCluster is Create on a Kubernetes cluster: the workspace and its history live
// on the sandbox's volume there, not on this host.
func (r *Runner) createOnCluster(ctx context.Context, spec Spec, tier wire.Tier, limits wire.Limits) (*Sandbox, error) {
	switch {
	case spec.Insecure || tier == wire.TierProcess:
		return nil, fmt.Errorf("the process tier runs on this host only; a cluster runs container and microvm sandboxes: %w", errdefs.ErrInvalidArgument)
	case spec.Workspace != "":
		return nil, fmt.Errorf("a host directory cannot be a cluster sandbox's workspace (it lives on the sandbox's volume): %w", errdefs.ErrInvalidArgument)
	case spec.Seed != nil:
		return nil, fmt.Errorf("a cluster sandbox cannot be seeded on this host (its store is on its volume: a fork goes through its agent): %w", errdefs.ErrUnavailable)
	}
	id, err := sandboxID(spec)
	if err != nil {
		return nil, err
	}
	rt := spec.Runtime
	if tier == wire.TierMicroVM {
		rt = "microvm"
	} else if rt != "" && rt != "runc" && rt != "runsc" {
		return nil, fmt.Errorf("runtime %q: want runc or runsc: %w", rt, errdefs.ErrInvalidArgument)
	}
	c, err := r.cluster()
	if err != nil {
		return nil, err
	}
	main := &wire.Command{Argv: spec.Main, Restart: spec.RestartMain, HotReload: spec.MainHotReload, Cwd: spec.MainDir}
	if len(spec.Main) == 0 {
		main = nil
	}
	req := kubespec.Request{
		ID: id, Runtime: rt, Limits: limits, Env: containerEnv(spec.Env), Main: main,
		UID: r.cfg.SandboxUID, GID: r.cfg.SandboxGID, CapabilityKeys: spec.CapabilityKeys,
		// A sandbox that is not persistent loses its workspace at Destroy anyway: it needs
		// no volume claim, which would be most of its start.
		Ephemeral: !spec.Persistent,
	}
	r.log.Info("creating sandbox on the cluster", "sandbox", id, "tier", tier, "runtime", rt, "user", spec.User, "namespace", c.Namespace())
	if spec.Pool {
		return r.templateOnCluster(ctx, c, spec, tier, req)
	}
	if r.cfg.Cluster.WarmPool.Any() {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := c.EnsurePool(pctx, r.cfg.Limits); err != nil {
			r.log.Warn("warm pool", "err", err)
		}
		cancel()
	}
	kb, hit, err := c.StartWarm(ctx, req, spec.Persistent)
	if err != nil {
		return nil, err
	}
	if hit {
		r.log.Info("sandbox claimed from the cluster's warm pool", "sandbox", id, "node", kb.NodeName())
	}
	sb := &Sandbox{ID: id, Tier: tier, Limits: limits, backend: kb, Node: kb.NodeName(), uid: r.cfg.SandboxUID, gid: r.cfg.SandboxGID}
	sb.agent = agentclient.New(kb.Conn())
	return sb, nil
}

// adoptOnCluster is Adopt on a Kubernetes cluster: every control plane that shares the
// cluster (and its CA) reaches the sandbox's pod.
func (r *Runner) adoptOnCluster(ctx context.Context, rec Record) (*Sandbox, error) {
	c, err := r.cluster()
	if err != nil {
		return nil, err
	}
	kb, err := c.Adopt(ctx, rec.ID, true)
	if err != nil {
		return nil, err
	}
	sb := &Sandbox{ID: rec.ID, Tier: rec.Tier, Limits: rec.Limits, backend: kb, Node: kb.NodeName(), uid: r.cfg.SandboxUID, gid: r.cfg.SandboxGID}
	sb.agent = agentclient.New(kb.Conn())
	return sb, nil
}

// Release lets the sandbox go without stopping it, for another control plane that took
// it over: its channel closes, and on a cluster the following of its objects ends.
func (s *Sandbox) Release() error {
	if r, ok := s.backend.(interface{ Release() error }); ok {
		return r.Release()
	}
	return s.agent.Close()
}

// removeFromCluster deletes a persistent cluster sandbox with its volume.
func (r *Runner) removeFromCluster(ctx context.Context, id string) error {
	c, err := r.cluster()
	if err != nil {
		return err
	}
	return c.Remove(ctx, id)
}
