// Package kubebackend links the Kubernetes backend (package kube) into the runner: a
// program that imports it runs sandboxes on a cluster when its runner's backend is
// kubernetes. The control plane and the bench import it; the CLI does not, so that
// `paddock run` does not link client-go and its start does not pay for client-go's
// initialisers.
package kubebackend

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/kube"
	"github.com/paddockhq/paddock/internal/sandbox/kubespec"
)

func init() { runner.RegisterCluster(open) }

func open(cfg kubespec.Config, log *slog.Logger) (runner.Cluster, error) {
	c, err := kube.Open(cfg, log)
	if err != nil {
		return nil, err
	}
	return cluster{c}, nil
}

// cluster is a kube.Cluster as the runner uses it.
type cluster struct{ *kube.Cluster }

func (c cluster) StartWarm(ctx context.Context, req kubespec.Request, persistent bool) (runner.ClusterSandbox, bool, error) {
	sb, hit, err := c.Cluster.StartWarm(ctx, req, persistent)
	if err != nil {
		return nil, hit, err
	}
	return sandbox{sb}, hit, nil
}

func (c cluster) StartTemplate(ctx context.Context, template string, req kubespec.Request) (runner.ClusterSandbox, bool, error) {
	sb, hit, err := c.Cluster.StartTemplate(ctx, template, req)
	if err != nil {
		return nil, hit, err
	}
	return sandbox{sb}, hit, nil
}

func (c cluster) Adopt(ctx context.Context, id string, persistent bool) (runner.ClusterSandbox, error) {
	sb, err := c.Cluster.Adopt(ctx, id, persistent)
	if err != nil {
		return nil, err
	}
	return sandbox{sb}, nil
}

// sandbox is a kube.Sandbox as the runner uses it.
type sandbox struct{ *kube.Sandbox }

func (s sandbox) NodeName() string { return s.Node }

// Of is r's cluster as package kube has it, opened on first use.
func Of(r *runner.Runner) (*kube.Cluster, error) {
	c, err := r.Cluster()
	if err != nil {
		return nil, err
	}
	return c.(cluster).Cluster, nil
}

// Collectors are r's metrics: its cluster's warm pools', when it has any.
func Collectors(r *runner.Runner) []prometheus.Collector {
	cc := r.ClusterConfig()
	if cc.Backend != runner.BackendKubernetes || !cc.WarmPool.Any() {
		return nil
	}
	c, err := Of(r)
	if err != nil {
		return nil
	}
	return c.Collectors()
}
