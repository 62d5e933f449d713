package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/paddockhq/paddock/internal/wire"
	"github.com/paddockhq/paddock/internal/wire/podtls"
)

// BootstrapWarmPod runs the agent in a warm pool's pod: it serves only the claim
// handshake, to the control plane alone, until one claim makes it a sandbox; then it
// serves that sandbox as BootstrapPod does. dir holds the CA's certificate and the pod's
// token (wire.PodTokenFile), which the kubelet keeps fresh. The claim's key never touches
// the disk.
func BootstrapWarmPod(ctx context.Context, dir string, log *slog.Logger) error {
	caPEM, err := os.ReadFile(filepath.Join(dir, podtls.CAFile))
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	cfg, err := podtls.WarmServerConfig(caPEM)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	addr := ":" + strconv.Itoa(wire.PodAgentPort)
	raw, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	tl, ok := raw.(*net.TCPListener)
	if !ok {
		return fmt.Errorf("bootstrap: %s is not a TCP listener", addr)
	}
	// The socket outlives the handshake's server: the control plane dials the sandbox at
	// once after the claim, and finds it listening, never refused.
	l := &keptListener{TCPListener: tl}
	w := &warm{dir: dir, claimed: make(chan warmResult, 1)}
	srv := &http.Server{Handler: w.mux(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(tls.NewListener(l, cfg))
	}()
	log.Info("warm: waiting for a claim", "addr", addr)
	var res warmResult
	select {
	case <-ctx.Done():
		_ = srv.Close()
		return ctx.Err()
	case res = <-w.claimed:
	}
	// The claim's answer is written before the handshake's listener goes.
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_ = srv.Shutdown(sctx)
	cancel()
	<-served
	log.Info("warm: claimed", "sandbox", res.env.SandboxID)
	if err := preparePod(res.env); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if err := tl.SetDeadline(time.Time{}); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	return Run(ctx, res.env, tls.NewListener(tl, res.cfg), nil, log)
}

// keptListener is the handshake server's view of the socket: closing it only ends that
// server's Accept (by a deadline), and the socket stays open for the sandbox's server.
type keptListener struct {
	*net.TCPListener
}

func (k *keptListener) Close() error { return k.SetDeadline(time.Now()) }

type warmResult struct {
	env *wire.Envelope
	cfg *tls.Config
}

type warm struct {
	dir     string
	once    sync.Mutex
	done    bool
	claimed chan warmResult
}

func (w *warm) mux() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("GET "+wire.WarmIdentityPath, func(rw http.ResponseWriter, _ *http.Request) {
		tok, err := os.ReadFile(filepath.Join(w.dir, wire.PodTokenFile))
		if err != nil {
			http.Error(rw, "no token: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		rw.Header().Set("Content-Type", "text/plain")
		_, _ = rw.Write(bytes.TrimSpace(tok))
	})
	m.HandleFunc("POST "+wire.WarmClaimPath, w.claim)
	return m
}

// claim takes the one claim this pod ever takes.
func (w *warm) claim(rw http.ResponseWriter, r *http.Request) {
	w.once.Lock()
	defer w.once.Unlock()
	if w.done {
		http.Error(rw, "this pod is claimed already", http.StatusConflict)
		return
	}
	res, err := readClaim(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	w.done = true
	rw.WriteHeader(http.StatusNoContent)
	w.claimed <- res
}

// readClaim checks a claim: an envelope with a listen address, and a pair the CA issued
// for the sandbox the envelope names.
func readClaim(r io.Reader) (warmResult, error) {
	var c wire.WarmClaim
	if err := json.NewDecoder(r).Decode(&c); err != nil {
		return warmResult{}, fmt.Errorf("claim: %w", err)
	}
	env, err := wire.ReadEnvelope(bytes.NewReader(c.Envelope))
	if err != nil {
		return warmResult{}, fmt.Errorf("claim: envelope: %w", err)
	}
	if env.ListenAddr == "" {
		return warmResult{}, errors.New("claim: the envelope has no listen_addr")
	}
	cfg, err := podtls.ServerConfig(podtls.Pair{Cert: c.Cert, Key: c.Key}, c.CA)
	if err != nil {
		return warmResult{}, fmt.Errorf("claim: %w", err)
	}
	leaf, err := podtls.Leaf(c.Cert)
	if err != nil {
		return warmResult{}, fmt.Errorf("claim: %w", err)
	}
	if err := leaf.VerifyHostname(podtls.ServerName(env.SandboxID)); err != nil {
		return warmResult{}, fmt.Errorf("claim: the certificate is not sandbox %s's: %w", env.SandboxID, err)
	}
	cfg.NextProtos = []string{"h2"}
	return warmResult{env: env, cfg: cfg}, nil
}
