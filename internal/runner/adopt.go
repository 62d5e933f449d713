package runner

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/sandbox/agentclient"
	"github.com/paddockhq/paddock/internal/sandbox/container"
	"github.com/paddockhq/paddock/internal/wire"
)

// Record is what the control plane keeps of a sandbox it started: enough to find it again
// after a restart.
type Record struct {
	ID      string
	User    string
	Tier    wire.Tier
	Runtime string
	Limits  wire.Limits
}

// adoptTimeout bounds the check that an adopted sandbox's agent still answers.
const adoptTimeout = 5 * time.Second

// Adopt reattaches to a persistent sandbox that an earlier control plane started and that
// still runs. Only container sandboxes under runc outlive the process that started them
// with a channel that can be dialled again, and so do a cluster's; for the others Adopt
// fails and the caller reaps them. An adopted sandbox whose agent does not answer is
// killed (on a cluster, it is not adopted).
func (r *Runner) Adopt(ctx context.Context, rec Record) (*Sandbox, error) {
	if !ValidID(rec.ID) || !validUser(rec.User) {
		return nil, fmt.Errorf("adopt %q of %q: %w", rec.ID, rec.User, errdefs.ErrInvalidArgument)
	}
	if r.cfg.OnCluster() {
		return r.adoptOnCluster(ctx, rec)
	}
	if rec.Tier != wire.TierContainer {
		return nil, fmt.Errorf("sandbox %s: a %s sandbox does not outlive the control plane that started it: %w", rec.ID, rec.Tier, errdefs.ErrUnavailable)
	}
	rt, err := r.containerRuntime(rec.Runtime)
	if err != nil {
		return nil, err
	}
	cs, err := rt.Adopt(ctx, rec.ID, r.stateDir(rec.ID), r.cfg.HostPorts)
	if err != nil {
		return nil, err
	}
	sb := &Sandbox{
		ID: rec.ID, Tier: rec.Tier, Limits: rec.Limits, backend: cs,
		History: filepath.Join(r.cfg.WorkspaceRoot, rec.User, "history", rec.ID),
		agent:   agentclient.New(cs.Conn()),
	}
	sb.Workspace, sb.disk = r.persistentWorkspace(rec.User, rec.ID)
	if sb.disk != nil {
		// A fork that froze it may have died before it thawed it.
		if err := thaw(sb.disk.mount); err != nil {
			r.log.Warn("could not thaw the sandbox's disk", "sandbox", rec.ID, "err", err)
		}
	}
	sb.shared = r.mountedShared(rec.User)
	sb.uid, sb.gid = r.sandboxUser(sb.Workspace)
	pctx, cancel := context.WithTimeout(ctx, adoptTimeout)
	defer cancel()
	if _, err := sb.agent.Info(pctx); err != nil {
		_ = sb.Destroy(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("sandbox %s: its agent does not answer: %w", rec.ID, errdefs.ErrUnavailable)
	}
	return sb, nil
}

// Reap removes whatever is left of a sandbox that cannot be adopted: its processes, its
// runtime record, its cgroup and its state directory. The workspace stays.
func (r *Runner) Reap(ctx context.Context, rec Record) error {
	if !ValidID(rec.ID) {
		return fmt.Errorf("reap %q: %w", rec.ID, errdefs.ErrInvalidArgument)
	}
	dir := r.stateDir(rec.ID)
	var errs []error
	if rec.Tier == wire.TierContainer {
		if rt, err := r.containerRuntime(rec.Runtime); err == nil {
			errs = append(errs, rt.Reap(ctx, rec.ID, dir))
		}
	}
	if g, err := cgroups.Load("/paddock/" + rec.ID); err == nil {
		errs = append(errs, g.Kill(ctx), g.Delete())
	}
	if err := container.RemoveState(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
