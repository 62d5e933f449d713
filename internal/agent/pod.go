package agent

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/paddockhq/paddock/internal/wire"
	"github.com/paddockhq/paddock/internal/wire/podtls"
)

// BootstrapPod runs the agent in a pod on a cluster: the envelope and the TLS pair come
// from dir (the pod's Secret, which only this pod mounts), and the agent listens on the
// envelope's listen_addr with mutual TLS, serving only the control plane (podtls).
func BootstrapPod(ctx context.Context, dir string, log *slog.Logger) error {
	env, cfg, err := readPod(dir, log)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if err := preparePod(env); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	l, err := net.Listen("tcp", env.ListenAddr)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	return Run(ctx, env, tls.NewListener(l, cfg), nil, log)
}

// readPod reads the envelope and the agent's TLS configuration from dir. The pair is read
// again at each connection: the control plane renews it while the sandbox runs by
// rewriting the Secret, which the kubelet then rewrites in dir.
func readPod(dir string, log *slog.Logger) (*wire.Envelope, *tls.Config, error) {
	f, err := os.Open(filepath.Join(dir, wire.EnvelopeFile))
	if err != nil {
		return nil, nil, err
	}
	env, err := wire.ReadEnvelope(f)
	f.Close()
	if err != nil {
		return nil, nil, err
	}
	if env.ListenAddr == "" {
		return nil, nil, fmt.Errorf("the envelope has no listen_addr: a pod's agent listens on the pod network")
	}
	ca, err := os.ReadFile(filepath.Join(dir, podtls.CAFile))
	if err != nil {
		return nil, nil, err
	}
	load := func() (pair podtls.Pair, err error) {
		if pair.Cert, err = os.ReadFile(filepath.Join(dir, podtls.CertFile)); err != nil {
			return pair, err
		}
		pair.Key, err = os.ReadFile(filepath.Join(dir, podtls.KeyFile))
		return pair, err
	}
	reloaded := func(notAfter time.Time) {
		log.Info("channel certificate renewed", "valid_until", notAfter.UTC().Format(time.RFC3339))
	}
	cfg, err := podtls.ServerConfigReloading(load, ca, reloaded)
	if err != nil {
		return nil, nil, err
	}
	cfg.NextProtos = []string{"h2"} // gRPC's clients insist on it
	return env, cfg, nil
}

// preparePod readies the volume's directories the kubelet made as root: the workspace
// becomes the sandbox user's the first time (later starts find it theirs already), and
// the history store stays root's and closed to everyone else.
func preparePod(env *wire.Envelope) error {
	if env.RunAs != nil {
		var st syscall.Stat_t
		if err := syscall.Stat(env.Workspace, &st); err != nil {
			return fmt.Errorf("workspace: %w", err)
		}
		if st.Uid == 0 {
			if err := os.Chown(env.Workspace, int(env.RunAs.UID), int(env.RunAs.GID)); err != nil {
				return fmt.Errorf("workspace: %w", err)
			}
			if err := os.Chmod(env.Workspace, 0o755); err != nil {
				return fmt.Errorf("workspace: %w", err)
			}
		}
	}
	if env.HistoryDir != "" {
		if err := os.MkdirAll(env.HistoryDir, 0o700); err != nil {
			return fmt.Errorf("history: %w", err)
		}
		if err := os.Chown(env.HistoryDir, 0, 0); err != nil {
			return fmt.Errorf("history: %w", err)
		}
		if err := os.Chmod(env.HistoryDir, 0o700); err != nil {
			return fmt.Errorf("history: %w", err)
		}
	}
	return nil
}
