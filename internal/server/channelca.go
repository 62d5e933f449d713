package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/secrets"
	"github.com/paddockhq/paddock/internal/wire/podtls"
)

// channelCAName is the channel's CA among the server's shared values (secrets.Shared).
const channelCAName = "sandbox channel CA"

// sharedCA is the channel's CA as the database keeps it, sealed.
type sharedCA struct {
	Cert []byte `json:"cert"`
	Key  []byte `json:"key"`
}

// ChannelCA is the CA of the sandboxes' channel on a cluster (package podtls) that
// replicas share: every replica must trust what another issued, since any may reach
// any sandbox. The operator's files in runner.ca_dir win; without them, the first
// replica to start makes the CA and stores it in the database, sealed under the secrets
// keyring the replicas share, and the others load it. Files given to one replica are
// stored for the others when the database has none yet. It is nil without replicas or a
// cluster: the runner then loads or makes the files as one control plane does.
func ChannelCA(ctx context.Context, cfg Config, sec *secrets.Secrets, log *slog.Logger) (*podtls.CA, error) {
	if cfg.Replica.ID == "" || !cfg.Runner.OnCluster() {
		return nil, nil
	}
	kc := cfg.Runner.Cluster.Config
	kc.Fill(cfg.Runner.DataDir)
	files, err := caFiles(kc.CADir)
	if err != nil {
		return nil, err
	}
	v, made, err := sec.Shared(ctx, channelCAName, func() ([]byte, error) {
		if files != nil {
			return json.Marshal(files)
		}
		ca, err := podtls.NewCA()
		if err != nil {
			return nil, err
		}
		key, err := ca.KeyPEM()
		if err != nil {
			return nil, err
		}
		return json.Marshal(sharedCA{Cert: ca.CertPEM(), Key: key})
	})
	if err != nil {
		return nil, fmt.Errorf("the sandbox channel's CA: %w", err)
	}
	var stored sharedCA
	if err := json.Unmarshal(v.Reveal(), &stored); err != nil {
		return nil, fmt.Errorf("the sandbox channel's CA in the database: %w", errdefs.ErrDataLoss)
	}
	use, from := stored, "the database"
	if files != nil {
		use, from = *files, kc.CADir
		if !bytes.Equal(files.Cert, stored.Cert) {
			log.Warn("the sandbox channel's CA in runner.ca_dir is not the one the other replicas share through the database: this replica uses its files, "+
				"and the others' sandboxes will not trust it, nor it theirs; give every replica the same files, or remove them to use the shared CA",
				"ca_dir", kc.CADir)
		}
	}
	ca, err := podtls.ParseCA(use.Cert, use.Key)
	if err != nil {
		return nil, fmt.Errorf("the sandbox channel's CA in %s: %w", from, err)
	}
	if made {
		log.Info("stored the sandbox channel's CA in the database, sealed under the secrets key, for the other replicas", "from", from)
	}
	return ca, nil
}

// caFiles reads the CA the operator put in dir, or nil when there is none.
func caFiles(dir string) (*sharedCA, error) {
	cert, cerr := os.ReadFile(filepath.Join(dir, "ca.crt"))
	key, kerr := os.ReadFile(filepath.Join(dir, "ca.key"))
	switch {
	case cerr == nil && kerr == nil:
		return &sharedCA{Cert: cert, Key: key}, nil
	case errors.Is(cerr, os.ErrNotExist) && errors.Is(kerr, os.ErrNotExist):
		return nil, nil
	}
	return nil, fmt.Errorf("the sandbox channel's CA in %s: want both ca.crt and ca.key, or neither: %w", dir, errdefs.ErrInvalidArgument)
}
