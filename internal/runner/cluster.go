package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paddockhq/paddock/internal/agentclient"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/sandbox/kube"
	"github.com/paddockhq/paddock/internal/wire"
)

// BackendKubernetes runs sandboxes on a Kubernetes cluster (ClusterConfig).
const BackendKubernetes = "kubernetes"

// ClusterConfig is where sandboxes run: on this host (backend empty or "local"), or on
// a Kubernetes cluster through the agent-sandbox CRDs (backend "kubernetes", with the
// fields of kube.Config; docs/kubernetes.md).
type ClusterConfig struct {
	// Backend is "local" (default) or "kubernetes".
	Backend     string `yaml:"backend"`
	kube.Config `yaml:",inline"`
}

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
		return c.Cluster.Validate()
	}
	return invalidField("runner.backend", "%q: want local or kubernetes", c.Cluster.Backend)
}

// cluster opens the cluster on first use.
func (r *Runner) cluster() (*kube.Cluster, error) {
	r.clusterMu.Lock()
	defer r.clusterMu.Unlock()
	if r.kube == nil {
		cfg := r.cfg.Cluster.Config
		cfg.Fill(r.cfg.DataDir) // a configuration built in code may not have been
		c, err := kube.Open(cfg, r.log)
		if err != nil {
			return nil, err
		}
		r.kube = c
		if cfg.WarmPool.Size > 0 {
			go r.ensurePool(c)
		}
	}
	return r.kube, nil
}

// ensurePool makes the cluster's warm pool for the runner's default limits; a create
// tries again when this could not (the pool then misses).
func (r *Runner) ensurePool(c *kube.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.EnsurePool(ctx, r.cfg.Limits); err != nil {
		r.log.Warn("warm pool", "err", err)
	}
}

// Collectors are the runner's metrics: the cluster's warm pool's, when it has one.
func (r *Runner) Collectors() []prometheus.Collector {
	if !r.cfg.OnCluster() || r.cfg.Cluster.WarmPool.Size == 0 {
		return nil
	}
	c, err := r.cluster()
	if err != nil {
		return nil
	}
	return c.Collectors()
}

// Cluster is the cluster sandboxes run on, opened on first use.
func (r *Runner) Cluster() (*kube.Cluster, error) { return r.cluster() }

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
	case spec.Pool:
		return nil, fmt.Errorf("the warm pool is this host's; on a cluster it is not available yet: %w", errdefs.ErrUnavailable)
	case spec.Seed != nil:
		return nil, fmt.Errorf("forks of a cluster sandbox are not available yet: %w", errdefs.ErrUnavailable)
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
	req := kube.Request{
		ID: id, Runtime: rt, Limits: limits, Env: containerEnv(spec.Env), Main: main,
		UID: r.cfg.SandboxUID, GID: r.cfg.SandboxGID, CapabilityKeys: spec.CapabilityKeys,
		// A sandbox that is not persistent loses its workspace at Destroy anyway: it needs
		// no volume claim, which would be most of its start.
		Ephemeral: !spec.Persistent,
	}
	r.log.Info("creating sandbox on the cluster", "sandbox", id, "tier", tier, "runtime", rt, "user", spec.User, "namespace", c.Namespace())
	if r.cfg.Cluster.WarmPool.Size > 0 {
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
		r.log.Info("sandbox claimed from the cluster's warm pool", "sandbox", id, "node", kb.Node)
	}
	sb := &Sandbox{ID: id, Tier: tier, Limits: limits, backend: kb, Node: kb.Node, uid: r.cfg.SandboxUID, gid: r.cfg.SandboxGID}
	sb.agent = agentclient.New(kb.Conn())
	return sb, nil
}

// removeFromCluster deletes a persistent cluster sandbox with its volume.
func (r *Runner) removeFromCluster(ctx context.Context, id string) error {
	c, err := r.cluster()
	if err != nil {
		return err
	}
	return c.Remove(ctx, id)
}
