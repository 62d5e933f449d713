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
