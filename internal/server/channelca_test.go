package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"database/sql"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/secrets"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/store/pgtest"
	"github.com/paddockhq/paddock/internal/wire/podtls"
)

// channelCA is replica id's channel CA on the database dbURL, its data dir its own and the
// secrets key file shared, as a replica loads it at start.
func channelCA(t *testing.T, dbURL, keyFile, id, dataDir string, logs *servertest.LogBuffer) *podtls.CA {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.NewTextHandler(logs, nil))
	sec, err := secrets.Open(ctx, st, secrets.KeySource{File: keyFile}, log)
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.Config{Runner: runner.Config{DataDir: dataDir, Cluster: runner.ClusterConfig{Backend: runner.BackendKubernetes}},
		Replica: server.ReplicaConfig{ID: id}}
	ca, err := server.ChannelCA(ctx, cfg, sec, log)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// trusts says whether a control plane holding cp's CA reaches a sandbox whose certificate
// issuer issued: a TLS handshake over a pipe, each side as the channel has it.
func trusts(t *testing.T, cp, issuer *podtls.CA) error {
	t.Helper()
	const id = "sb-aaaaaaaaaa"
	own, err := issuer.IssueSandbox(id)
	if err != nil {
		t.Fatal(err)
	}
	scfg, err := podtls.ServerConfig(own, issuer.CertPEM())
	if err != nil {
		t.Fatal(err)
	}
	client, err := cp.IssueControlPlane()
	if err != nil {
		t.Fatal(err)
	}
	ccfg, err := cp.ClientConfig(client, id)
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	done := make(chan error, 1)
	go func() { done <- tls.Server(a, scfg).Handshake() }()
	cerr := tls.Client(b, ccfg).Handshake()
	a.Close()
	serr := <-done
	if cerr != nil {
		return cerr
	}
	return serr
}

// Two replicas on one PostgreSQL database, each with its own data dir and no CA file
// copied: the first makes the channel's CA and stores it sealed in the database, the
// second loads it, and each trusts what the other issued (both ways). A replica given
// CA files keeps its files. The CA's private key is in no log and no file of a replica
// that did not get it from its operator; in the database it is sealed.
func TestChannelCASharedByReplicas(t *testing.T) {
	dbURL := pgtest.URL(t)
	keyFile := filepath.Join(t.TempDir(), "secrets.key")
	logs := &servertest.LogBuffer{}
	dirA, dirB := t.TempDir(), t.TempDir()
	a := channelCA(t, dbURL, keyFile, "ra", dirA, logs)
	b := channelCA(t, dbURL, keyFile, "rb", dirB, logs)
	if err := trusts(t, b, a); err != nil {
		t.Fatalf("replica B reaching a sandbox whose certificate replica A issued: %v", err)
	}
	if err := trusts(t, a, b); err != nil {
		t.Fatalf("replica A reaching a sandbox whose certificate replica B issued: %v", err)
	}
	if again := channelCA(t, dbURL, keyFile, "ra", dirA, logs); !bytes.Equal(again.CertPEM(), a.CertPEM()) {
		t.Error("replica A restarted with another CA")
	}

	// The operator's files win on the replica given them.
	own, err := podtls.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	ownKey, _ := own.KeyPEM()
	dirC := t.TempDir()
	os.MkdirAll(filepath.Join(dirC, "kube-ca"), 0o700)
	os.WriteFile(filepath.Join(dirC, "kube-ca", "ca.crt"), own.CertPEM(), 0o644)
	os.WriteFile(filepath.Join(dirC, "kube-ca", "ca.key"), ownKey, 0o600)
	c := channelCA(t, dbURL, keyFile, "rc", dirC, logs)
	if !bytes.Equal(c.CertPEM(), own.CertPEM()) {
		t.Error("a replica given CA files does not use them")
	}
	if err := trusts(t, b, c); err == nil {
		t.Error("replica B trusts a certificate of another CA")
	}

	key, _ := a.KeyPEM()
	keyB64 := strings.TrimSpace(strings.Split(string(key), "\n")[1])
	if strings.Contains(logs.String(), keyB64) {
		t.Error("the log holds the CA's private key")
	}
	for _, dir := range []string{dirA, dirB} {
		if _, err := os.Stat(filepath.Join(dir, "kube-ca", "ca.key")); err == nil {
			t.Errorf("the CA's key was written to %s", dir)
		}
	}
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var dump []byte
	if err := db.QueryRow(`SELECT ciphertext FROM sealed_values`).Scan(&dump); err != nil {
		t.Fatal(err)
	}
	if len(dump) == 0 || bytes.Contains(dump, []byte(keyB64)) || bytes.Contains(dump, []byte("PRIVATE KEY")) {
		t.Errorf("the database's sealed values (%d bytes) hold the CA's key in the clear", len(dump))
	}
}
