package runner_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/runner"
	_ "github.com/paddockhq/paddock/internal/runner/kubebackend" // the runner opens clusters
	"github.com/paddockhq/paddock/internal/testenv"
)

// deadKubeconfig is a kubeconfig whose API server is a loopback port nothing listens on.
func deadKubeconfig(t *testing.T) (path, addr string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = l.Addr().String()
	l.Close()
	path = filepath.Join(t.TempDir(), "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://%s", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, addr)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, addr
}

// TestClusterUnreachable: with the API server down, the health check and a start both say
// that it is unreachable and where, as unavailable.
func TestClusterUnreachable(t *testing.T) {
	kc, addr := deadKubeconfig(t)
	cfg := runner.DefaultConfig()
	cfg.DataDir, cfg.StateDir = t.TempDir(), t.TempDir()
	cfg.Cluster = runner.ClusterConfig{Backend: runner.BackendKubernetes}
	cfg.Cluster.Kubeconfig, cfg.Cluster.Image = kc, "paddock/agent:test"
	cfg, err := runner.LoadConfigFrom(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := runner.New(cfg, testenv.Logger(t))
	for what, err := range map[string]error{
		"health": r.Check(),
		"start":  startErr(r),
	} {
		if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "unreachable") || !strings.Contains(err.Error(), addr) {
			t.Errorf("%s: %v; want unavailable, saying the API server at %s is unreachable", what, err, addr)
		}
	}
}

func startErr(r *runner.Runner) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := r.Create(ctx, runner.Spec{User: "conf", Main: []string{"true"}})
	return err
}
