package server_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/server"
)

// A pool's templates are read from the configuration file and checked as it loads: a
// template no provider has is refused there, naming it and the providers there are.
func TestLoadConfigPoolTemplates(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("pool: {size: 1, templates: {node: 2}, env: [\"npm_config_registry=http://mirror/\"]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := server.LoadConfig(good, dir, "")
	if err != nil || cfg.Pool.Size != 1 || cfg.Pool.Templates["node"] != 2 || len(cfg.Pool.Env) != 1 {
		t.Fatalf("LoadConfig: %+v, %v", cfg.Pool, err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("pool: {templates: {dotnet: 1}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = server.LoadConfig(bad, dir, "")
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `pool.templates: runtime "dotnet": want one of node, go, rust, static`) {
		t.Fatalf("LoadConfig of an unknown template: %v", err)
	}
}

// On a cluster, the fleet's template pools load; the default app's pool is refused,
// naming runner.warm_pool, the cluster's own.
func TestLoadConfigPoolOnCluster(t *testing.T) {
	dir := t.TempDir()
	runner := "runner: {backend: kubernetes, image: paddock.local/agent:1, kubeconfig: /dev/null}\n"
	for _, tc := range []struct{ name, pool, err string }{
		{"templates", "pool: {templates: {node: 1, static: 2}}\n", ""},
		{"default app", "pool: {size: 1}\n", "pool.size: the warm pool of the default app is this host's; on a cluster, set runner.warm_pool.size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name+".yaml")
			if err := os.WriteFile(p, []byte(runner+tc.pool), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := server.LoadConfig(p, dir, "")
			switch {
			case tc.err == "" && (err != nil || cfg.Pool.Templates["static"] != 2):
				t.Fatalf("LoadConfig: %+v, %v", cfg.Pool, err)
			case tc.err != "" && (!errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("LoadConfig: %v, want %q", err, tc.err)
			}
		})
	}
}
