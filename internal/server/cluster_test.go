package server_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
)

// TestHealthzSaysTheClusterIsUnreachable: on a cluster whose API server does not answer,
// /healthz is 503 and its runner check says so, naming the address.
func TestHealthzSaysTheClusterIsUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	body := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://%s\"}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n", addr)
	if err := os.WriteFile(kc, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	e := servertest.Start(t, func(c *server.Config) {
		c.Runner.Cluster = runner.ClusterConfig{Backend: runner.BackendKubernetes}
		c.Runner.Cluster.Kubeconfig, c.Runner.Cluster.Image = kc, "paddock/agent:test"
	})
	resp, err := http.Get(e.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	var h api.Health
	servertest.Decode(t, resp, http.StatusServiceUnavailable, &h)
	if got := h.Checks["runner"]; !strings.Contains(got, "unreachable") || !strings.Contains(got, addr) {
		t.Fatalf("runner check %q: want it to say the API server at %s is unreachable", got, addr)
	}
}
