package servercmd

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/server"
)

func newServeCommand() *cobra.Command {
	var dataDir, listen, config, storeURL string
	var debug bool
	c := &cobra.Command{
		Use:   "serve",
		Short: "run the control plane: accounts, sandboxes, the live/dev proxy, the API",
		Long: `serve runs paddock's control plane on one machine: an embedded SQLite database under
the data dir (or PostgreSQL, with --store postgres://...), the sandbox runner, the pages /login, /register and /recovery, the API under
/api/v1/, /metrics and /healthz. Every other path of a signed-in user is served by that
user's live (or dev) sandbox, through a role-aware proxy.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			cfg, err := server.LoadConfig(config, dataDir, listen)
			if err != nil {
				return err
			}
			if storeURL != "" {
				if err := server.CheckStore(storeURL); err != nil {
					return fmt.Errorf("--store: %w", err)
				}
				cfg.Store = storeURL
			}
			level := slog.LevelInfo
			if debug {
				level = slog.LevelDebug
			}
			log := slog.New(slog.NewTextHandler(c.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
			return serve(c, cfg, log)
		},
	}
	c.Flags().StringVar(&dataDir, "data", "", "data directory (default: $XDG_DATA_HOME/paddock, /var/lib/paddock as root)")
	c.Flags().StringVar(&listen, "listen", "", "address to listen on (default "+server.DefaultListen+")")
	c.Flags().StringVar(&config, "config", "", "YAML configuration file")
	c.Flags().StringVar(&storeURL, "store", "", "the control plane's database: a postgres:// URL (default: SQLite, paddock.db in the data directory)")
	c.Flags().BoolVar(&debug, "debug", false, "log at debug level")
	return c
}

func serve(c *cobra.Command, cfg server.Config, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	l, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %v: %w", cfg.Listen, err, errdefs.ErrUnavailable)
	}
	s, err := server.New(ctx, cfg, log, server.Options{})
	if err != nil {
		l.Close()
		return err
	}
	if cfg.Metrics.Listen != "" {
		_, stopMetrics, err := serveMetrics(cfg.Metrics.Listen, s.MetricsHandler(), log)
		if err != nil {
			s.Close()
			l.Close()
			return err
		}
		defer stopMetrics()
	}
	// SIGHUP reads the policy files again (Server.Reload logs what changed or failed).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = s.Reload(ctx)
			}
		}
	}()
	out := c.OutOrStdout()
	s.Banner(out, l.Addr().String())
	user, password, err := s.FirstAdmin(ctx)
	if err != nil {
		s.Close()
		l.Close()
		return err
	}
	if password != "" {
		fmt.Fprintf(out, "\nFirst start: created the admin account %q with the password\n\n    %s\n\nIt is shown this once and stored only as a hash. Sign in at http://%s/login.\n\n", user, password, l.Addr())
	}
	return s.Serve(ctx, l)
}

// serveMetrics serves /metrics alone, without a token, on addr (metrics.listen), and
// returns the address it listens on.
func serveMetrics(addr string, h http.Handler, log *slog.Logger) (bound string, stop func(), err error) {
	ml, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("metrics.listen %s: %v: %w", addr, err, errdefs.ErrUnavailable)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	go func() { _ = hs.Serve(ml) }()
	return ml.Addr().String(), func() { hs.Close() }, nil
}
