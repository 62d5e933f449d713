package kube

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
)

// Pools taken out of the configuration. Every SandboxWarmPool paddock makes is labelled
// with its name (LabelPool) and, on a control plane that is one of several replicas,
// marked with an annotation per replica whose configuration has it (ReplicaMarkPrefix
// and the replica's ID). At start, paddock takes its own mark off each runner pool of its
// namespace that its configuration no longer has (and the fleet, of its template pools),
// and deletes the pool and its template when no replica's mark is left on it. So replicas sharing a cluster delete none of the
// pools another one still has, even while their configurations differ.

// ReplicaMarkPrefix begins the annotation by which a replica says a pool is in its
// configuration: replica.paddock.dev/<replica ID>.
const ReplicaMarkPrefix = "replica.paddock.dev/"

// LabelReplica is on the claims of the members a replica readies for the fleet's template
// pools and the default app's: its ID. Its cleanup at start deletes only those.
const LabelReplica = "paddock.dev/replica"

// replicaMark is this replica's mark, empty without replicas.
func (c *Cluster) replicaMark() string {
	if c.cfg.Replica == "" {
		return ""
	}
	return ReplicaMarkPrefix + c.cfg.Replica
}

// ReplicaMarks are the replicas whose mark is on annotations, sorted.
func ReplicaMarks(annotations map[string]string) []string {
	var ids []string
	for k := range annotations {
		if id, ok := strings.CutPrefix(k, ReplicaMarkPrefix); ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// isRunnerPool says whether name is one of the runner's warm pools (runner.warm_pool),
// not a template pool or the default app's.
func isRunnerPool(name string) bool {
	return name == PoolName || strings.HasPrefix(name, PoolName+"-")
}

// isFleetPool says whether name is one of the fleet's pools: a template's or the default
// app's.
func isFleetPool(name string) bool {
	return name == AppPoolName || strings.HasPrefix(name, templatePrefix)
}

// PruneTemplatePools deletes the fleet's pools of the namespace that paddock made and
// templates does not name ("" names the default app's), unless another replica's mark is
// on them.
func (c *Cluster) PruneTemplatePools(ctx context.Context, templates []string) error {
	var keep []string
	for _, t := range templates {
		name, err := poolNameOf(t)
		if err != nil {
			return err
		}
		keep = append(keep, name)
	}
	tp := c.templates()
	tp.mu.Lock()
	defer tp.mu.Unlock()
	for name := range tp.made {
		if !slices.Contains(keep, name) {
			delete(tp.made, name)
		}
	}
	return c.prunePools(ctx, keep, isFleetPool)
}

// prunePools deletes the pools of the namespace that paddock made (by its labels), that
// ours says are of the kind being pruned and keep does not name, unless another replica's
// mark is on them.
func (c *Cluster) prunePools(ctx context.Context, keep []string, ours func(string) bool) error {
	list, err := c.pool.ext.SandboxWarmPools(c.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + ManagedBy + "," + LabelPool})
	if apierrors.IsNotFound(err) {
		return nil // the cluster has no agent-sandbox extensions: no pool either
	}
	if err != nil {
		return c.apiError("list the warm pools", err)
	}
	var errs []error
	for _, wp := range list.Items {
		if !ours(wp.Name) || wp.Labels[LabelPool] != wp.Name || wp.DeletionTimestamp != nil || slices.Contains(keep, wp.Name) {
			continue
		}
		errs = append(errs, c.prunePool(ctx, wp.Name))
	}
	return errors.Join(errs...)
}

// poolWrites paces the writes to a pool that the controller updates too (its status
// bumps the version at each member it readies): a conflict is read again.
var poolWrites = wait.Backoff{Steps: 12, Duration: 20 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Cap: 2 * time.Second}

// prunePool takes this replica's mark off the SandboxWarmPool called name and deletes it
// and its template when no other replica's mark is left. The delete is conditional on the
// version read: a replica that marks the pool meanwhile keeps it.
func (c *Cluster) prunePool(ctx context.Context, name string) error {
	pools := c.pool.ext.SandboxWarmPools(c.cfg.Namespace)
	deleted := false
	err := retry.RetryOnConflict(poolWrites, func() error {
		wp, err := pools.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && wp.DeletionTimestamp != nil) {
			return nil
		}
		if err != nil {
			return err
		}
		if mark := c.replicaMark(); mark != "" {
			if _, ok := wp.Annotations[mark]; ok {
				delete(wp.Annotations, mark)
				if wp, err = pools.Update(ctx, wp, metav1.UpdateOptions{FieldManager: ManagedBy}); err != nil {
					return err
				}
			}
		}
		if others := ReplicaMarks(wp.Annotations); len(others) > 0 {
			c.log.Info("warm pool no longer configured kept: other replicas have it", "pool", name, "replicas", others)
			return nil
		}
		fg := metav1.DeletePropagationForeground
		err = pools.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &fg, Preconditions: &metav1.Preconditions{UID: &wp.UID, ResourceVersion: &wp.ResourceVersion}})
		deleted = err == nil
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return c.apiError("delete the warm pool "+name, err)
	}
	if !deleted {
		return nil
	}
	c.log.Info("warm pool no longer configured: deleted", "pool", name, "namespace", c.cfg.Namespace)
	templates := c.pool.ext.SandboxTemplates(c.cfg.Namespace)
	tmpl, err := templates.Get(ctx, name, metav1.GetOptions{})
	if err != nil || tmpl.Labels[LabelManagedBy] != ManagedBy || tmpl.Labels[LabelPool] != name {
		return nil
	}
	err = templates.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &tmpl.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return c.apiError("delete the warm pool's template "+name, err)
	}
	return nil
}
