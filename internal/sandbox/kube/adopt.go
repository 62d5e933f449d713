package kube

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/sandbox"
)

// Adopt takes up sandbox id, which another control plane started and which still runs:
// it finds its Sandbox (its own, or the warm pool's member its claim names), dials the
// agent over mutual TLS, and issues it a fresh certificate as a renewal does. It
// changes nothing that runs: a sandbox that is suspended, or whose pod is not ready, is
// not adopted. The agent presents its earlier certificate until the kubelet brings the
// new one, and both are the CA's, so the control planes that adopt must share the CA.
func (c *Cluster) Adopt(ctx context.Context, id string, persistent bool) (*Sandbox, error) {
	sb := &Sandbox{c: c, ID: id, persistent: persistent, Agent: sandbox.Agent{AgentExited: make(chan struct{})}}
	if cl, err := c.pool.ext.SandboxClaims(c.cfg.Namespace).Get(ctx, id, metav1.GetOptions{}); err == nil {
		if cl.Labels[LabelManagedBy] != ManagedBy || cl.Labels[LabelSandbox] != id || cl.Status.SandboxStatus.Name == "" {
			return nil, fmt.Errorf("sandbox %s: its SandboxClaim is not one paddock made, or names no member: %w", id, errdefs.ErrFailedPrecondition)
		}
		sb.name, sb.claimed = cl.Status.SandboxStatus.Name, true
	} else if !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
		return nil, c.apiError("the claim of sandbox "+id, err)
	}
	have, err := c.sbx.Get(ctx, sb.obj(), metav1.GetOptions{})
	if err != nil {
		return nil, c.apiError("adopt sandbox "+id, err)
	}
	if have.Labels[LabelManagedBy] != ManagedBy || have.Labels[LabelSandbox] != id {
		return nil, fmt.Errorf("the Sandbox %s/%s is not paddock's sandbox %s: %w", c.cfg.Namespace, have.Name, id, errdefs.ErrFailedPrecondition)
	}
	if have.Spec.OperatingMode != "" && have.Spec.OperatingMode != sbv1.SandboxOperatingModeRunning {
		return nil, fmt.Errorf("sandbox %s is %s on the cluster: %w", id, have.Spec.OperatingMode, errdefs.ErrUnavailable)
	}
	// What paddock wrote is what it finds: the template to compare later reads with, and
	// to write back over a hand edit.
	sb.want = have.DeepCopy()
	sb.want.Status = sbv1.SandboxStatus{}
	sb.template = templateHash(have.Spec.PodTemplate)
	c.track()
	// The agent answers as the sandbox under this CA before its Secret is written: a
	// control plane with another CA changes nothing.
	if err := c.connect(ctx, sb, have.Generation, true); err != nil {
		return nil, err
	}
	if sb.pair, err = c.renewSecret(ctx, id); err != nil {
		sb.AgentConn.Close()
		return nil, err
	}
	sb.follow(true)
	c.log.Info("sandbox adopted", "sandbox", id, "node", sb.Node)
	return sb, nil
}

// Release lets the sandbox go without touching it on the cluster: the following of its
// objects and the renewal of its certificate end, and the channel closes. It is for a
// sandbox another control plane has taken over.
func (s *Sandbox) Release() error {
	if s.stopWatch != nil {
		s.stopWatch()
		<-s.watching
		<-s.renewing
	}
	s.mu.Lock()
	select {
	case <-s.AgentExited:
	default:
		close(s.AgentExited)
	}
	s.mu.Unlock()
	return s.CloseConn()
}
