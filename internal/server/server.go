// Package server is `paddock serve`: the trusted control plane. It owns the pages and
// endpoints of authentication (/login, /register, /recovery, /auth/*, from package web),
// the lifecycle API (/api/v1/*), health (/healthz) and metrics (/metrics), on its own host.
// Sandboxes' apps are served on hosts under the apps domain (package origins), each
// proxied, HTTP and WebSocket, to the sandbox it names (package proxy); the control plane
// never serves any of it itself, nor on its own host (ADR-0004, decision 11).
package server

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/paddockhq/paddock/internal/auth"
	"github.com/paddockhq/paddock/internal/broker"
	"github.com/paddockhq/paddock/internal/egress"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/gateway"
	"github.com/paddockhq/paddock/internal/origins"
	"github.com/paddockhq/paddock/internal/policy"
	"github.com/paddockhq/paddock/internal/proxy"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandboxops"
	"github.com/paddockhq/paddock/internal/secrets"
	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/web"
	"github.com/paddockhq/paddock/internal/wire"
)

// Server is a running control plane.
type Server struct {
	cfg Config
	// stopBackups ends the scheduled backups; nil without a schedule.
	stopBackups context.CancelFunc
	// poolReached holds, by template pool member, the *poolHosts its readying reached.
	poolReached sync.Map
	log         *slog.Logger
	st          *store.Store
	auth        *auth.Service
	web         *web.Web
	secrets     *secrets.Secrets
	runner      *runner.Runner
	fleet       *fleet.Fleet
	proxy       *proxy.Proxy
	// origins places the apps hosts; handoffs holds their codes and cookies (apphosts.go).
	origins  *origins.Origins
	handoffs *origins.Handoffs
	reg      *prometheus.Registry
	m        *metrics
	handler  http.Handler
	// desktop serves the desktop hosts (desktop.go).
	desktop http.Handler
	health  healthCache
	// broker and services are the host's services to sandboxes (services.go).
	broker       *broker.Broker
	services     http.Handler
	gateway      *gateway.Gateway // nil when no provider is configured
	servicesPort int
	egress       *egress.Proxy                 // nil without a network policy
	netPolicy    atomic.Pointer[policy.Policy] // the server's network_policy, the ceiling of every sandbox's
	// upstreamProxy is egress_upstream_proxy, or nil.
	upstreamProxy *url.URL
	// reloaded is the text of each policy file as last loaded, for Reload (reload.go) to
	// tell a change; reloadMu serializes reloads.
	reloadMu sync.Mutex
	reloaded struct{ network, broker string }
	// pol finds the policy in force for a sandbox; caps mints and checks capability
	// tokens; ops runs every operation on a sandbox (package sandboxops).
	pol  *sandboxops.Policies
	caps *sandboxops.Capabilities
	ops  *sandboxops.Ops
	// metricsToken, when set, may read /metrics (metrics.token_file).
	metricsToken string
	// cluster is this replica's part among several (replicas.go), nil when it is the only
	// one; clusterStop ends its heartbeat and its listening for promotions.
	cluster     *cluster
	clusterStop context.CancelFunc
	// started is when this process's server was made; steps tracks the provider steps it
	// runs (steps.go).
	started time.Time
	steps   stepRuns
	// backups is the backup store, nil without one; artifacts' copies go there too
	// (artifacts_bucket.go), uploaded by goroutines that copies counts and stopCopies ends.
	backups *sandboxops.Backups
	copies  artifactCopies
	// handOns serves the client connections other replicas hand on to this one, and holds
	// those it hands on (handon.go); nil when it is the only one.
	handOns *handOns
}

// Options are what tests change; the zero value is production.
type Options struct {
	// AuthOptions are added to the auth service's (tests use cheap Argon2 parameters).
	AuthOptions []auth.Option
	// Egress are the egress proxy's options (tests resolve names to loopback servers).
	Egress egress.Options
	// HandoffClock is the clock of handoff codes and apps-host cookies (nil: time.Now).
	HandoffClock func() time.Time
}

// New opens the data dir (creating what a first start needs), recovers the sandboxes an
// earlier run left, and wires the handlers. Close releases it all.
func New(ctx context.Context, cfg Config, log *slog.Logger, opts Options) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.Runner.DataDir, 0o711); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	st, err := store.Open(ctx, StoreTarget(cfg))
	if err != nil {
		return nil, err
	}
	log.Info("store", "backend", st.Backend(), "at", st.Path())
	// Tests build a Config by hand, without LoadConfig's defaults.
	cfg.ServicesURL = cmp.Or(cfg.ServicesURL, DefaultServicesURL)
	s := &Server{cfg: cfg, log: log, st: st, reg: prometheus.NewRegistry(), started: time.Now()}
	if err := s.init(ctx, opts); err != nil {
		st.Close()
		return nil, err
	}
	return s, nil
}

// HandoffsFileName is the file in the data dir that keeps the app and desktop hosts'
// sign-ins (their cookies' SHA-256, user, session, host and expiry) across restarts.
const HandoffsFileName = "handoffs.json"

// DatabasePath is the control plane's SQLite database in cfg's data dir.
func DatabasePath(cfg Config) string { return filepath.Join(cfg.Runner.DataDir, "paddock.db") }

// StoreTarget is what store.Open opens for cfg: its PostgreSQL URL (store), or else the
// SQLite database in its data dir.
func StoreTarget(cfg Config) string { return cmp.Or(cfg.Store, DatabasePath(cfg)) }

// CheckStore checks a store setting: empty, or a PostgreSQL URL that parses. The error
// never quotes a password.
func CheckStore(target string) error {
	if target == "" {
		return nil
	}
	if !store.IsPostgresURL(target) {
		return fmt.Errorf("store: %q is not a postgres:// URL (leave it empty for SQLite in the data dir): %w",
			store.RedactURL(target), errdefs.ErrInvalidArgument)
	}
	if err := store.CheckPostgresURL(target); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// SecretsKeySource is where the users' secrets key comes from: PADDOCK_SECRETS_KEY when it
// is set, otherwise the key file (secrets_key_file, default <data_dir>/secrets.key).
func SecretsKeySource(cfg Config) secrets.KeySource {
	file := cfg.SecretsKeyFile
	if file == "" {
		file = filepath.Join(cfg.Runner.DataDir, secrets.KeyFileName)
	}
	return secrets.KeySourceFromEnv(file)
}

func (s *Server) init(ctx context.Context, opts Options) error {
	cfg := s.cfg
	// First, so that a wrong secrets key stops the start before any sandbox is touched.
	var err error
	if s.secrets, err = secrets.Open(ctx, s.st, SecretsKeySource(cfg), s.log); err != nil {
		return err
	}
	if s.origins, err = origins.New(cfg.Origins()); err != nil {
		return err
	}
	s.handoffs = origins.NewHandoffs(opts.HandoffClock)
	if cfg.Replica.ID != "" {
		// A code minted by one replica is exchanged on another, a cookie checked on any.
		s.handoffs.Share(s.st)
	} else if err := s.handoffs.Persist(filepath.Join(cfg.Runner.DataDir, HandoffsFileName)); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(cfg.Listen); err == nil && !auth.LoopbackListen(cfg.Listen) && s.origins.AppsDomain() == origins.DefaultAppsDomain && cfg.PublicURL == "" {
		s.log.Warn("listening beyond loopback, but apps are served on *.localhost and the control plane at 127.0.0.1: only this machine's browsers can reach them; set public_url and apps_domain (a wildcard DNS name of a site of its own)",
			"listen", cfg.Listen)
	}
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Tests build a Config by hand: the registration mode's default comes from listen.
	mode, err := auth.ParseRegistrationMode(cfg.Registration, cmp.Or(cfg.Listen, DefaultListen))
	if err != nil {
		return err
	}
	aopts := []auth.Option{auth.WithLogger(s.log), auth.WithTrustedOrigins(cfg.TrustedOrigins...), auth.WithRegistration(mode),
		auth.WithTokenLifetime(cmp.Or(cfg.Tokens.DefaultTTL, auth.DefaultTokenTTL), cmp.Or(cfg.Tokens.MaxTTL, auth.MaxTokenTTL))}
	if cfg.SecureCookies {
		aopts = append(aopts, auth.WithSecureCookies())
	}
	s.auth = auth.New(s.st, append(aopts, opts.AuthOptions...)...)
	if s.metricsToken, err = loadMetricsToken(cfg.Metrics.TokenFile); err != nil {
		return err
	}
	s.web = web.New(web.Options{Auth: s.auth, Log: s.log, FormTargets: []string{"*." + s.origins.AppsDomain() + ":*"}, Start: s.startSandboxes,
		DesktopURL: s.desktopHandoff})
	app := store.App{Command: cfg.App.Command, Port: cfg.App.Port, Build: cfg.App.Build}
	if len(app.Command) == 0 {
		app = store.App{Command: wire.WelcomeCommand(wire.AgentPath, 8080), Port: 8080, Build: "welcome"}
	}
	if s.pol, err = sandboxops.NewPolicies(cfg.Policy, cfg.Runner.UsersDir, cfg.Runner.MaxLimits, s.st, s.log); err != nil {
		return err
	}
	if s.caps, err = sandboxops.NewCapabilities(cfg.Runner.DataDir, s.st); err != nil {
		return err
	}
	servicesURL := cfg.ServicesURL
	netPolicy, netText, err := loadNetworkPolicy(cfg.NetworkPolicy)
	if err != nil {
		return err
	}
	if cfg.EgressUpstreamProxy != "" {
		if s.upstreamProxy, err = egress.ParseUpstreamProxy(cfg.EgressUpstreamProxy); err != nil {
			return fmt.Errorf("egress_upstream_proxy: %w", err)
		}
	}
	env := append([]string{wire.ServicesEnv + "=" + servicesURL}, gatewayEnv(cfg.Gateway, servicesURL)...)
	if s.servicesPort, err = servicesPort(servicesURL); err != nil {
		return err
	}
	cfg.Runner.HostPorts = []int{s.servicesPort}
	if netPolicy != nil {
		env = append(env, egressEnv()...)
		cfg.Runner.HostPorts = append(cfg.Runner.HostPorts, EgressPort)
	}
	if cfg.Runner.OnCluster() {
		// The cluster's warm pool makes its pods for a new sandbox's default limits,
		// whose memory is the fleet's.
		cfg.Runner.Limits.Memory = cmp.Or(cfg.SandboxMemory, fleet.DefaultMemory)
	}
	// Replicas on a cluster share the channel's CA through the database.
	if cfg.Runner.Cluster.CA, err = ChannelCA(ctx, cfg, s.secrets, s.log); err != nil {
		return err
	}
	// Its pools' objects and members are marked with the replica, for its cleanups at start.
	cfg.Runner.Cluster.Replica = cfg.Replica.ID
	s.runner = runner.New(cfg.Runner, s.log)
	tier, why := s.runner.DefaultTierReason()
	s.log.Info("default tier", "tier", tier, "why", why)
	s.fleet, err = fleet.New(s.st, s.runner, fleet.Config{
		Tier: cfg.Runner.Tier, Runtime: cfg.Runtime, Memory: cfg.SandboxMemory, Quota: cfg.Quota, App: app,
		Env: env, AgentKeys: s.caps.AgentKeys, Pool: cfg.Pool, Idle: cfg.Idle,
		Replica: cfg.Replica.ID, ReplicaTTL: cmpDuration(cfg.Replica.HeartbeatTTL, defaultHeartbeatTTL),
		// A cluster's sandboxes are every replica's to reach: a dead one's are taken over.
		TakeOver: cfg.Replica.ID != "" && cfg.Runner.OnCluster(),
	}, s.reg, s.log)
	if err != nil {
		return err
	}
	backups, err := newBackups(cfg, s.st, s.log)
	if err != nil {
		return err
	}
	if backups != nil {
		if err := backups.Register(s.reg); err != nil {
			return err
		}
	}
	s.ops = sandboxops.New(sandboxops.Config{Fleet: s.fleet, Store: s.st, Log: s.log, Policies: s.pol, Capabilities: s.caps, Backups: backups})
	s.backups = backups
	if every := cfg.Backup.every(); every > 0 && backups != nil {
		bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		s.stopBackups = cancel
		go s.ops.RunBackups(bctx, every)
	}
	if backups != nil && backups.Retention != nil {
		rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		stop := s.stopBackups
		s.stopBackups = func() {
			cancel()
			if stop != nil {
				stop()
			}
		}
		go s.ops.RunRetention(rctx, 24*time.Hour)
	}
	s.proxy, err = proxy.New(router{s.fleet}, proxy.Options{
		Registerer: s.reg, Log: s.log, ReservedCookies: append(web.ReservedCookies(), origins.CookieName, origins.SecureCookieName), TrustedOrigins: cfg.TrustedOrigins,
		Event:           s.event,
		ReconnectWindow: time.Duration(cfg.Reconnects.Window) * time.Second, ReconnectLimit: cfg.Reconnects.Limit,
		Reconnects: s.sharedReconnects(),
	})
	if err != nil {
		return err
	}
	s.fleet.SetHooks(s.sandboxGone, s.proxy.OwnerChanged)
	s.fleet.SetBusy(func(id string) bool { return s.proxy.WebSockets(id) > 0 })
	s.initEgress(netPolicy, netText, opts.Egress)
	if err := s.initServices(); err != nil {
		return err
	}
	if s.m, err = newMetrics(s.reg, s.fleet); err != nil {
		return err
	}
	if err := s.initCluster(ctx); err != nil {
		return err
	}
	if err := s.fleet.Recover(ctx); err != nil {
		return fmt.Errorf("recover sandboxes: %w", err)
	}
	s.handler = s.routes()
	s.startArtifactCopies(ctx)
	if s.cluster != nil {
		s.startHandOns()
	}
	return nil
}

// Handler is the control plane's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Secrets is the users' secrets store (the broker resolves leases with it).
func (s *Server) Secrets() *secrets.Secrets { return s.secrets }

// Ops is what can be done to the server's sandboxes, for front doors other than its HTTP
// API (the MCP server, the SDK service, the desktop) and for tests.
func (s *Server) Ops() *sandboxops.Ops { return s.ops }

// Fleet is the server's sandbox lifecycle (tests and benchmarks reach sandboxes with it).
func (s *Server) Fleet() *fleet.Fleet { return s.fleet }

// Close stops serving WebSockets and releases the store. Sandboxes keep running: the next
// start adopts them. DestroySandboxes stops them instead.
func (s *Server) Close() error {
	if s.stopBackups != nil {
		s.stopBackups()
	}
	s.stopArtifactCopies()
	s.closeCluster()
	if s.handOns != nil {
		s.handOns.close()
	}
	s.proxy.Close()
	s.fleet.Close()
	s.broker.Close()
	if s.gateway != nil {
		s.gateway.Close() // its usage records go to the store
	}
	if s.egress != nil {
		s.egress.Close()
	}
	return s.st.Close()
}

// DestroySandboxes stops every running sandbox.
func (s *Server) DestroySandboxes(ctx context.Context) { s.fleet.DestroyAll(ctx) }

// event records an event in the audit log (for the proxy, the gateway and the server's
// own refusals).
func (s *Server) event(ctx context.Context, userID, action string, detail map[string]any) {
	s.ops.Event(ctx, userID, action, detail)
}

// startSandboxes makes and starts u's standing sandboxes (the start page's button).
func (s *Server) startSandboxes(ctx context.Context, u auth.User) error {
	_, _, _, err := s.fleet.Roles(ctx, fleet.Caller{UserID: u.ID, Username: u.Username, Admin: u.IsAdmin()})
	return err
}

// FirstAdmin creates the first account, an admin with a random password, when there is no
// account at all. It returns the password, to be shown once, or "" when accounts exist.
func (s *Server) FirstAdmin(ctx context.Context) (username, password string, err error) {
	n, err := s.st.CountUsers(ctx)
	if err != nil || n > 0 {
		return "", "", err
	}
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	password = base64.RawURLEncoding.EncodeToString(b)
	_, err = s.auth.Register(ctx, auth.RegisterRequest{Username: "admin", Password: auth.Password(password), Role: store.RoleAdmin})
	if err != nil {
		return "", "", fmt.Errorf("create the first admin: %w", err)
	}
	return "admin", password, nil
}

// Serve serves on l until ctx ends, then shuts down gracefully (in-flight requests get
// 10 s) and closes the server.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(l) }()

	select {
	case err := <-done:
		s.Close()
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.proxy.Close() // hijacked WebSockets are not Shutdown's
	err := hs.Shutdown(sctx)
	if s.handOns != nil {
		err = errors.Join(err, s.handOns.shutdown(sctx))
	}
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// Banner explains in one paragraph what runs where; `paddock serve` prints it at start.
func (s *Server) Banner(w io.Writer, addr string) {
	fmt.Fprintf(w, `paddock control plane on http://%[1]s — open http://%[1]s/register to make an account, or /login.
Data: %[2]s (%[10]s, workspaces in %[3]s). Sandboxes: %[4]s tier; their runtime state in %[5]s.
Each user gets a live and a dev sandbox when they first open their app, served through this proxy on hosts of their
own under %[8]s (http://live-<user>.%[8]s:<port>, reached by signing in here); the control plane serves no app.
API: http://%[1]s/api/v1/ (api/openapi.yaml); metrics: /metrics (for admins, or metrics.token_file's token); health: /healthz. Stop with Ctrl-C: sandboxes keep running and are adopted at the next start.
SIGHUP (kill -HUP %[7]d) reads the policy files and the capability keyring again.
Users' secrets (PUT /me/secrets/NAME) are encrypted with the key from the %[6]s: back it up apart from the database.
Registration: %[9]s (registration in the config; an admin makes invite codes with paddock invite create).
`, addr, s.cfg.Runner.DataDir, s.cfg.Runner.WorkspaceRoot, tierName(s.cfg.Runner.Tier), s.cfg.Runner.StateDir, SecretsKeySource(s.cfg), os.Getpid(),
		s.origins.AppsDomain(), s.auth.RegistrationMode(), s.storeBanner())
}

// storeBanner says where the control plane's database is, for the banner.
func (s *Server) storeBanner() string {
	if s.st.Backend() == "postgres" {
		return "PostgreSQL database " + s.st.Path()
	}
	return "SQLite database paddock.db"
}

func tierName(t wire.Tier) string {
	if t != "" {
		return string(t)
	}
	return string(wire.TierContainer)
}

// router adapts the fleet to the proxy: the owner of a role, reached on its own loopback,
// directly in its network namespace where the host shares it (runc) or else through a
// tunnel over the sandbox's agent channel; never a host port another sandbox could reach.
type router struct{ f *fleet.Fleet }

func (r router) Route(ctx context.Context, userID, role string) (proxy.Target, int64, error) {
	o, err := r.f.Owner(ctx, fleet.Caller{UserID: userID}, role)
	if err != nil {
		return proxy.Target{}, 0, err
	}
	h, port := o.Handle, o.Sandbox.App.Port
	return proxy.Target{
		SandboxID: o.Sandbox.ID, Role: role, Build: o.Sandbox.App.Build,
		Dial: func(ctx context.Context) (net.Conn, error) { return h.DialPort(ctx, port) },
	}, o.Generation, nil
}

// RouteSandbox reaches one of userID's running sandboxes by ID, for its own apps host.
func (r router) RouteSandbox(ctx context.Context, userID, id string) (proxy.Target, error) {
	c := fleet.Caller{UserID: userID}
	rec, err := r.f.Get(ctx, c, id)
	if err != nil {
		return proxy.Target{}, err
	}
	h, err := r.f.Handle(ctx, c, id)
	if err != nil {
		return proxy.Target{}, fmt.Errorf("it is %s, not running: start it: %w", rec.State, errdefs.ErrUnavailable)
	}
	role, err := r.f.RoleOf(ctx, userID, id)
	if err != nil {
		return proxy.Target{}, err
	}
	port := rec.App.Port
	return proxy.Target{
		SandboxID: id, Role: role, Build: rec.App.Build,
		Dial: func(ctx context.Context) (net.Conn, error) { return h.DialPort(ctx, port) },
	}, nil
}
