package kube

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	xv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/sandbox/kubespec"
	"github.com/paddockhq/paddock/internal/wire"
)

// Template pools. The fleet's pool of a provider's template (pool: {templates: {node: 1}})
// is, on a cluster, a SandboxTemplate and a SandboxWarmPool of its own, both named
// TemplatePoolName(template). The controller keeps that many pods started; the fleet
// claims one (the same handshake as the runner's warm pool, pool.go), readies it with
// the provider's setup through its agent, and keeps it until a new project of that
// runtime takes its files. Its claim is labelled with the pool's name, so that a later
// control plane finds and deletes the members an earlier one left.

// templatePrefix begins every template pool's name.
const templatePrefix = "paddock-tmpl-"

// templateName is what a provider's template may be called to name a pool: a DNS label
// once prefixed.
var templateName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

// AppPoolName names the SandboxTemplate and SandboxWarmPool of the fleet's pool of the
// default app (pool.size), whose template is "" here.
const AppPoolName = "paddock-app"

// poolNameOf is TemplatePoolName, or AppPoolName for the default app ("").
func poolNameOf(template string) (string, error) {
	if template == "" {
		return AppPoolName, nil
	}
	return TemplatePoolName(template)
}

// TemplatePoolName names the SandboxTemplate and SandboxWarmPool of template's pool.
func TemplatePoolName(template string) (string, error) {
	name := templatePrefix + template
	if !templateName.MatchString(template) || len(name) > 63 {
		return "", fmt.Errorf("pool.templates.%s: a cluster's pool is named %s<template>, which must be a DNS label (lower-case letters, digits and '-', at most 63 characters): %w",
			template, templatePrefix, errdefs.ErrInvalidArgument)
	}
	return name, nil
}

// templatePools holds what each template pool was last made for.
type templatePools struct {
	mu   sync.Mutex
	made map[string]templateMade
}

type templateMade struct {
	size   int
	limits wire.Limits
}

func (c *Cluster) templates() *templatePools {
	tp := &c.tmpl
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.made == nil {
		tp.made = map[string]templateMade{}
	}
	return tp
}

// EnsureTemplatePool makes or rewrites template's pool (the default app's, for ""): size
// pods of limits on the default runtime.
func (c *Cluster) EnsureTemplatePool(ctx context.Context, template string, size int, limits wire.Limits) error {
	name, err := poolNameOf(template)
	if err != nil {
		return err
	}
	if size < 1 || size > kubespec.MaxPoolSize {
		field := "pool.templates." + template
		if template == "" {
			field = "pool.size"
		}
		return fmt.Errorf("%s: %d: want 1 to %d on a cluster: %w", field, size, kubespec.MaxPoolSize, errdefs.ErrInvalidArgument)
	}
	tp := c.templates()
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if m, ok := tp.made[name]; ok && m == (templateMade{size, limits}) {
		return nil
	}
	if err := c.putPoolSecret(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: poolCASecret, Namespace: c.cfg.Namespace, Labels: poolLabels()},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{"ca.crt": c.ca.CertPEM()},
	}); err != nil {
		return err
	}
	if err := c.putPoolObjects(ctx, name, size, kubespec.KeyOf("", limits)); err != nil {
		return err
	}
	tp.made[name] = templateMade{size, limits}
	c.log.Info("template pool ready to fill", "pool", name, "size", size, "namespace", c.cfg.Namespace)
	return nil
}

// putPoolObjects creates or rewrites the SandboxTemplate and SandboxWarmPool called name,
// of size pods of key's runtime and limits; an object of that name that paddock did not
// make is refused.
func (c *Cluster) putPoolObjects(ctx context.Context, name string, size int, key kubespec.PoolKey) error {
	tmpl, err := poolTemplate(&c.cfg, key)
	if err != nil {
		return err
	}
	relabel(tmpl.Labels, name)
	relabel(tmpl.Spec.PodTemplate.ObjectMeta.Labels, name)
	relabel(tmpl.Spec.VolumeClaimTemplates[0].Labels, name)
	tmpl.Name = name
	tc := c.pool.ext.SandboxTemplates(c.cfg.Namespace)
	have, err := tc.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = tc.Create(ctx, tmpl, metav1.CreateOptions{FieldManager: ManagedBy})
	case err == nil:
		if have.Labels[LabelManagedBy] != ManagedBy {
			return fmt.Errorf("the SandboxTemplate %s/%s exists and paddock did not make it: %w", c.cfg.Namespace, name, errdefs.ErrFailedPrecondition)
		}
		have.Spec = tmpl.Spec
		_, err = tc.Update(ctx, have, metav1.UpdateOptions{FieldManager: ManagedBy})
	}
	if err != nil {
		return c.apiError("the SandboxTemplate "+name, err)
	}
	n := int32(size)
	wp := &xv1.SandboxWarmPool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.cfg.Namespace, Labels: tmpl.Labels},
		Spec: xv1.SandboxWarmPoolSpec{
			Replicas: &n, TemplateRef: xv1.SandboxTemplateRef{Name: name},
			UpdateStrategy: &xv1.SandboxWarmPoolUpdateStrategy{Type: xv1.RecreateSandboxWarmPoolUpdateStrategyType},
		},
	}
	mark := c.replicaMark()
	if mark != "" {
		wp.Annotations = map[string]string{mark: ""}
	}
	// Replicas rewrite a shared pool at once, each adding its mark, and the controller
	// writes its status: a conflict is read again.
	err = retry.RetryOnConflict(poolWrites, func() error {
		pc := c.pool.ext.SandboxWarmPools(c.cfg.Namespace)
		havePool, err := pc.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = pc.Create(ctx, wp, metav1.CreateOptions{FieldManager: ManagedBy})
		case err == nil:
			if havePool.Labels[LabelManagedBy] != ManagedBy {
				return fmt.Errorf("the SandboxWarmPool %s/%s exists and paddock did not make it: %w", c.cfg.Namespace, name, errdefs.ErrFailedPrecondition)
			}
			havePool.Spec = wp.Spec
			if mark != "" {
				metav1.SetMetaDataAnnotation(&havePool.ObjectMeta, mark, "")
			}
			_, err = pc.Update(ctx, havePool, metav1.UpdateOptions{FieldManager: ManagedBy})
		}
		return err
	})
	if errors.Is(err, errdefs.ErrFailedPrecondition) {
		return err
	}
	if err != nil {
		return c.apiError("the SandboxWarmPool "+name, err)
	}
	return nil
}

// relabel points the pool label of m at pool name.
func relabel(m map[string]string, name string) {
	if m != nil {
		m[LabelPool] = name
	}
}

// StartTemplate starts sandbox req, a member of template's pool (the default app's, for ""), from a pod the pool
// holds ready (hit), waiting up to ready_timeout for the controller to start one: the
// pool keeps as many pods as the fleet readies members, so a cold start would be one pod
// more. Past that, or when the claim fails, it starts cold. It is not persistent:
// Destroy deletes it.
func (c *Cluster) StartTemplate(ctx context.Context, template string, req Request) (sb *Sandbox, hit bool, err error) {
	name, err := poolNameOf(template)
	if err != nil {
		return nil, false, err
	}
	c.waitPoolReady(ctx, name)
	sb, err = c.claimFrom(ctx, name, req, false)
	if err == nil {
		return sb, true, nil
	}
	if !errors.Is(err, errNoClaim) {
		c.log.Warn("template pool claim failed; starting cold", "sandbox", req.ID, "pool", name, "err", err)
	}
	sb, err = c.Start(ctx, req, false)
	return sb, false, err
}

// Adopt makes a member of the default app's pool its user's sandbox: persistent from now
// on (a stop keeps its workspace), and its claim no longer labelled with the pool, so that
// no later control plane reaps it as a member.
func (s *Sandbox) Adopt(ctx context.Context) error {
	if s.claimed {
		patch := []byte(`{"metadata":{"labels":{"` + LabelPool + `":null,"` + LabelReplica + `":null}}}`)
		_, err := s.c.pool.ext.SandboxClaims(s.c.cfg.Namespace).Patch(ctx, s.ID, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: ManagedBy})
		if err != nil {
			return s.c.apiError("adopt sandbox "+s.ID, err)
		}
	}
	s.persistent = true
	return nil
}

// waitPoolReady waits until the SandboxWarmPool called name has a ready member, or
// ready_timeout passes.
func (c *Cluster) waitPoolReady(ctx context.Context, name string) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReadyTimeout)
	defer cancel()
	for i := 1; ; i++ {
		if n, err := c.poolReady(ctx, name); err == nil && n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(50*time.Millisecond*time.Duration(i), time.Second)):
		}
	}
}

// RemoveTemplatePool deletes template's pool (its unclaimed members go with it).
func (c *Cluster) RemoveTemplatePool(ctx context.Context, template string) error {
	name, err := poolNameOf(template)
	if err != nil {
		return err
	}
	tp := c.templates()
	tp.mu.Lock()
	defer tp.mu.Unlock()
	delete(tp.made, name)
	return c.removePoolObjects(ctx, name, false)
}

// ReapTemplateMembers deletes the template pools' claims an earlier run of this control
// plane left, and the default app pool's not yet a user's (Adopt): members are no one's,
// and none is adopted. Only this replica's (LabelReplica), or without replicas those
// that no replica made: another live replica holds its own.
func (c *Cluster) ReapTemplateMembers(ctx context.Context) error {
	claims := c.pool.ext.SandboxClaims(c.cfg.Namespace)
	mine := "!" + LabelReplica
	if c.cfg.Replica != "" {
		mine = LabelReplica + "=" + c.cfg.Replica
	}
	list, err := claims.List(ctx, metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + ManagedBy + "," + LabelPool + "," + mine})
	if apierrors.IsNotFound(err) {
		return nil // the cluster has no agent-sandbox extensions: no member either
	}
	if err != nil {
		return c.apiError("list the template pools' claims", err)
	}
	var errs []error
	for _, cl := range list.Items {
		pool := cl.Labels[LabelPool]
		if pool != AppPoolName && (len(pool) <= len(templatePrefix) || pool[:len(templatePrefix)] != templatePrefix) {
			continue
		}
		errs = append(errs, c.removeClaim(ctx, cl.Name))
	}
	return errors.Join(errs...)
}
