package server_test

import (
	"errors"
	"fmt"
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

// On a cluster, the fleet's pools load, the default app's as well as the templates'
// (each a SandboxWarmPool); a size over a SandboxWarmPool's is refused, naming it, and so
// are the runner's warm pools that are wrong.
func TestLoadConfigPoolOnCluster(t *testing.T) {
	dir := t.TempDir()
	runner := "runner: {backend: kubernetes, image: paddock.local/agent:1, kubeconfig: /dev/null, runtime_classes: {runsc: gvisor}, %s}\n"
	for _, tc := range []struct{ name, warm, pool, err string }{
		{"templates", "", "pool: {templates: {node: 1, static: 2}}\n", ""},
		{"default app", "", "pool: {size: 2}\n", ""},
		{"default app too big", "", "pool: {size: 1001}\n", "pool.size: 1001: want at most 1000 on a cluster"},
		{"template too big", "", "pool: {templates: {node: 1001}}\n", "pool.templates.node: 1001: want at most 1000 on a cluster"},
		{"runner pools", "warm_pool: {size: 1, pools: [{memory: 256MiB, size: 2}, {runtime: runsc, size: 1}, {runtime: runsc, cpus: 1, size: 1}]}", "", ""},
		{"duplicate key", "warm_pool: {pools: [{runtime: runsc, size: 1}, {runtime: runsc, size: 2}]}", "",
			"runner.warm_pool.pools[1]: runtime runsc with memory"},
		{"duplicate of the default pool", "warm_pool: {size: 1, pools: [{runtime: runc, size: 2}]}", "",
			"is the key of warm_pool.size already"},
		{"pool too big", "warm_pool: {pools: [{memory: 1GiB, size: 1001}]}", "", "runner.warm_pool.pools[0].size: 1001: want 1 to 1000"},
		{"pool of no size", "warm_pool: {pools: [{memory: 1GiB}]}", "", "runner.warm_pool.pools[0].size: 0: want 1 to 1000"},
		{"unknown runtime", "warm_pool: {pools: [{runtime: kata, size: 1}]}", "", `runner.warm_pool.pools[0].runtime: "kata": want runc, runsc or microvm`},
		{"runtime with no class", "warm_pool: {pools: [{runtime: microvm, size: 1}]}", "", "runner.warm_pool.pools[0].runtime: microvm: runtime_classes names no RuntimeClass for it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name+".yaml")
			if err := os.WriteFile(p, []byte(fmt.Sprintf(runner, tc.warm)+tc.pool), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := server.LoadConfig(p, dir, "")
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("LoadConfig: %v", err)
			case tc.err != "" && (!errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("LoadConfig: %v, want %q", err, tc.err)
			}
		})
	}
}
