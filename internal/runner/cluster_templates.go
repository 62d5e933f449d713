package runner

import (
	"context"
	"errors"
	"time"

	"github.com/paddockhq/paddock/internal/sandbox/agentclient"
	"github.com/paddockhq/paddock/internal/sandbox/kubespec"
	"github.com/paddockhq/paddock/internal/wire"
)

// templateOnCluster starts a member of a provider's template pool, or of the default
// app's pool (PoolTemplate empty), on the cluster: claimed from the pool's SandboxWarmPool
// (made first, for the runner's default limits), or cold when it has no pod ready. The
// member is not persistent until Claim gives it to a user: Discard deletes it, its claim
// and its volume.
func (r *Runner) templateOnCluster(ctx context.Context, c Cluster, spec Spec, tier wire.Tier, req kubespec.Request) (*Sandbox, error) {
	if err := c.EnsureTemplatePool(ctx, spec.PoolTemplate, spec.PoolSize, req.Limits); err != nil {
		return nil, err
	}
	kb, hit, err := c.StartTemplate(ctx, spec.PoolTemplate, req)
	if err != nil {
		return nil, err
	}
	r.log.Info("template pool member on the cluster", "sandbox", req.ID, "template", spec.PoolTemplate, "claimed", hit, "node", kb.NodeName())
	sb := &Sandbox{ID: req.ID, Tier: tier, Limits: req.Limits, backend: kb, Node: kb.NodeName(), uid: r.cfg.SandboxUID, gid: r.cfg.SandboxGID}
	sb.agent = agentclient.New(kb.Conn())
	return sb, nil
}

// claimOnCluster gives a member of the default app's pool to its user: its workspace is on
// its volume, not on this host, so nothing moves; the member stops being the pool's.
func claimOnCluster(cs ClusterSandbox) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return cs.Adopt(ctx)
}

// reapOnCluster deletes the template pools' members an earlier control plane left, and
// the template pools not in templates.
func (r *Runner) reapOnCluster(ctx context.Context, templates []string) error {
	c, err := r.cluster()
	if err != nil {
		return err
	}
	return errors.Join(c.ReapTemplateMembers(ctx), c.PruneTemplatePools(ctx, templates))
}
