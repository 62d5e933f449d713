package server

import (
	"fmt"
	"maps"
	"slices"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/kube"
)

// checkPoolOnCluster refuses what the fleet's pool cannot do on a cluster: the default
// app's pool (its sandboxes' files move into a user's tree on this host when claimed;
// runner.warm_pool is the cluster's), and a template whose pool's name is not a DNS label.
func checkPoolOnCluster(p fleet.PoolConfig, rc runner.Config) error {
	if !rc.OnCluster() {
		return nil
	}
	if p.Size > 0 {
		return fmt.Errorf("pool.size: the warm pool of the default app is this host's; on a cluster, set runner.warm_pool.size instead (pool.templates works on both): %w", errdefs.ErrInvalidArgument)
	}
	for _, name := range slices.Sorted(maps.Keys(p.Templates)) {
		if _, err := kube.TemplatePoolName(name); err != nil {
			return err
		}
	}
	return nil
}
