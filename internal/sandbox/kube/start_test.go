package kube_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/sandbox/kube"
)

// TestPersistentIsNeverEphemeral: a persistent sandbox asked for with an ephemeral
// workspace, which would not outlive its stop, is refused before the cluster is asked
// anything (the kubeconfig names an API server that is not there).
func TestPersistentIsNeverEphemeral(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	const cfg = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c := testConfig()
	c.Kubeconfig, c.CADir = kc, filepath.Join(dir, "ca")
	cl, err := kube.Open(*c, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	_, err = cl.Start(context.Background(), kube.Request{ID: "sb-aaaaaaaaaa", UID: 1000, GID: 1000, Ephemeral: true}, true)
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("err %v, want a refusal", err)
	}
}
