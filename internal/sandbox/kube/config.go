package kube

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/paddockhq/paddock/internal/sandbox/kubespec"
)

// Config is the runner's Kubernetes backend (package kubespec, which links no client).
type Config = kubespec.Config

// Toleration is a taint a sandbox's pod tolerates (kubespec.Toleration).
type Toleration = kubespec.Toleration

// WarmPool is a pool setting (kubespec.WarmPool).
type WarmPool = kubespec.WarmPool

// Request is a sandbox as the runner asks for it (kubespec.Request).
type Request = kubespec.Request

// DefaultNamespace is the sandboxes' namespace when the configuration names none.
const DefaultNamespace = kubespec.DefaultNamespace

// toleration is t as Kubernetes has it.
func toleration(t Toleration) corev1.Toleration {
	return corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOperator(t.Operator), Value: t.Value,
		Effect: corev1.TaintEffect(t.Effect), TolerationSeconds: t.TolerationSeconds}
}

// tolerations are c's as Kubernetes has them.
func tolerations(c *Config) []corev1.Toleration {
	var out []corev1.Toleration
	for _, t := range c.PodTolerations() {
		out = append(out, toleration(t))
	}
	return out
}

// PullNever is the image pull policy of images already on the nodes.
const PullNever = kubespec.PullNever
