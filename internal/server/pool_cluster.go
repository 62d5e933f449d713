package server

import (
	"fmt"
	"maps"
	"slices"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/kube"
	"github.com/paddockhq/paddock/internal/sandbox/kubespec"
)

// checkPoolOnCluster refuses what the fleet's pools cannot be on a cluster: a pool over
// the size of a SandboxWarmPool paddock makes, and a template whose pool's name is not a
// DNS label.
func checkPoolOnCluster(p fleet.PoolConfig, rc runner.Config) error {
	if !rc.OnCluster() {
		return nil
	}
	if p.Size > kubespec.MaxPoolSize {
		return fmt.Errorf("pool.size: %d: want at most %d on a cluster: %w", p.Size, kubespec.MaxPoolSize, errdefs.ErrInvalidArgument)
	}
	for _, name := range slices.Sorted(maps.Keys(p.Templates)) {
		if _, err := kube.TemplatePoolName(name); err != nil {
			return err
		}
		if n := p.Templates[name]; n > kubespec.MaxPoolSize {
			return fmt.Errorf("pool.templates.%s: %d: want at most %d on a cluster: %w", name, n, kubespec.MaxPoolSize, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}
