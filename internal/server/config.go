package server

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/paddockhq/paddock/internal/auth"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/gateway"
	"github.com/paddockhq/paddock/internal/origins"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandboxops"
	"github.com/paddockhq/paddock/internal/wire"
)

// DefaultListen is where `paddock serve` listens unless told otherwise: loopback only, so
// that a first start exposes nothing to the network.
const DefaultListen = "127.0.0.1:8080"

// Config is `paddock serve`'s configuration: one YAML file (--config) whose top level holds
// the runner's settings (data_dir, state_dir, tier, limits, …) and the control plane's own.
// Every field has a working default, so no file is needed.
type Config struct {
	Runner runner.Config `yaml:",inline"`
	// Listen is the address to serve on.
	Listen string `yaml:"listen"`
	// Store is the control plane's database: empty for SQLite at <data_dir>/paddock.db,
	// or a PostgreSQL URL (postgres://user@host/db). --store overrides it.
	Store string `yaml:"store"`
	// Runtime is the OCI runtime of new container sandboxes: runc (default) or runsc.
	Runtime string `yaml:"runtime"`
	// Quota bounds each user's sandboxes (default 10 sandboxes, 8 GiB of memory limits).
	Quota fleet.Quota `yaml:"quota"`
	// Pool keeps sandboxes of the default app started ahead (default none): see docs/pool.md.
	Pool fleet.PoolConfig `yaml:"pool"`
	// Idle stops a user's live and dev sandboxes that nothing used for a while (default
	// never): see docs/pool.md.
	Idle fleet.IdleConfig `yaml:"idle"`
	// SandboxMemory is a new sandbox's memory limit when its request gives none (512M).
	SandboxMemory wire.Size `yaml:"sandbox_memory"`
	// App is what new sandboxes run by default; empty means the built-in welcome page.
	App AppConfig `yaml:"app"`
	// TrustedOrigins are origins besides the server's own whose pages may make
	// state-changing requests and open WebSockets ("https://ide.example.com").
	TrustedOrigins []string `yaml:"trusted_origins"`
	// AppsDomain is the DNS name under which sandboxes' pages are served, one host per
	// sandbox and per user's role (app-<sandbox>.<apps_domain>, live-<user>.<apps_domain>),
	// never on the control plane's host (default localhost: browsers resolve every
	// *.localhost to loopback). In a deployment, a wildcard DNS name of a site of its own.
	AppsDomain string `yaml:"apps_domain"`
	// PublicURL is the control plane's URL as browsers reach it ("https://paddock.example.com");
	// app hosts use its scheme and port. Default: http://127.0.0.1 on the port requests
	// come to. It must not be under apps_domain nor the same site.
	PublicURL string `yaml:"public_url"`
	// SecureCookies marks cookies Secure (and __Host-) even on plain HTTP: set it when
	// a TLS-terminating proxy stands in front.
	SecureCookies bool `yaml:"secure_cookies"`
	// Reconnects bounds WebSocket reconnects per user (a reconnect storm past it gets 429).
	Reconnects ReconnectConfig `yaml:"reconnects"`
	// SecretsKeyFile is the keyring that encrypts users' secrets (an absolute path; default
	// <data_dir>/secrets.key, made with a fresh key on first start). Keep it out of the
	// database's backups and back it up on its own. PADDOCK_SECRETS_KEY, when set,
	// replaces it.
	SecretsKeyFile string `yaml:"secrets_key_file"`
	// ServicesURL is where processes in a sandbox reach the host's services (the secrets
	// broker): an http URL on the sandbox's own loopback, relayed by its agent
	// (default DefaultServicesURL). Sandboxes find it in PADDOCK_SERVICES_URL.
	ServicesURL string `yaml:"services_url"`
	// BrokerPolicy is the secrets broker's policy file (capability → secret names; see
	// package broker). Without one the broker denies every capability.
	BrokerPolicy string `yaml:"broker_policy"`
	// BrokerGrants limits the broker's grants (resolves and renewals) per sandbox; past
	// it a sandbox gets 429 with Retry-After.
	BrokerGrants BrokerGrantsConfig `yaml:"broker_grants"`
	// Gateway configures the provider gateway: the LLM providers sandboxes reach through
	// the host's services at /gateway/NAME/, with the platform's key added outside the
	// sandbox (see package gateway). Without providers there is no gateway.
	Gateway gateway.Config `yaml:"gateway"`
	// NetworkPolicy is a policy file (see package policy) whose network section every
	// sandbox's egress obeys: with one, sandboxes reach the hosts it allows through the
	// egress proxy (HTTP_PROXY); without one, they have no network at all.
	NetworkPolicy string `yaml:"network_policy"`
	// EgressUpstreamProxy, when set, is a forward proxy (http://[user:password@]host:port)
	// the egress proxy connects through, after deciding each request by the policy: a
	// corporate proxy in front of the internet. Off by default.
	EgressUpstreamProxy string `yaml:"egress_upstream_proxy"`
	// Registration is who may make an account at /register: open, invite (with a code
	// from POST /api/v1/invites or `paddock invite create`) or closed. Default: open when
	// listen is a loopback address, invite otherwise.
	Registration string `yaml:"registration"`
	// Tokens bounds API tokens' lifetimes.
	Tokens TokensConfig `yaml:"tokens"`
	// Metrics says who may read /metrics.
	Metrics MetricsConfig `yaml:"metrics"`
	// Policy is the default policy file (see package policy) of every sandbox that has no
	// policy of its own and whose owner has none (<users_dir>/policies/<user>.yaml): its
	// shell and file rules are enforced on the API's exec and file operations. Without one,
	// such sandboxes have no rules. It is loaded, and its resources checked against
	// max_limits, at start: a mistake stops the start with the line and field.
	Policy string `yaml:"policy"`
	// Backup is where sandboxes' workspace histories are backed up (default: nowhere): see
	// docs/backup.md.
	Backup BackupConfig `yaml:"backup"`
	// Replica makes this server one of several replicas on one PostgreSQL database
	// (default: the only one): see docs/postgres.md#replicas.
	Replica ReplicaConfig `yaml:"replica"`
}

// BrokerGrantsConfig is the broker's per-sandbox grant rate.
type BrokerGrantsConfig struct {
	// PerSecond is the steady rate (default 5).
	PerSecond int `yaml:"per_second"`
	// Burst is how many a quiet sandbox may have at once (default 50).
	Burst int `yaml:"burst"`
}

// TokensConfig bounds API tokens' lifetimes, as Go durations ("720h").
type TokensConfig struct {
	// DefaultTTL is a new token's lifetime when its request asks for none (720h).
	DefaultTTL time.Duration `yaml:"default_ttl"`
	// MaxTTL is the longest lifetime a request may ask for (8760h).
	MaxTTL time.Duration `yaml:"max_ttl"`
}

// MetricsConfig says who may read /metrics: a bearer API token of an admin with scope
// admin, or the token in TokenFile (for a scraper).
type MetricsConfig struct {
	// TokenFile holds a bearer token (one line, at least 32 characters) that may read
	// /metrics; an absolute path.
	TokenFile string `yaml:"token_file"`
	// Listen is a second address serving /metrics alone, without a token (a loopback or
	// private address for a scraper); empty for none.
	Listen string `yaml:"listen"`
}

// AppConfig is the default app template.
type AppConfig struct {
	Command []string `yaml:"command"`
	Port    int      `yaml:"port"`
	Build   string   `yaml:"build"`
}

// ReconnectConfig sets the reconnect-storm threshold: more than Limit WebSocket connections
// by one user within Window seconds.
type ReconnectConfig struct {
	Limit  int `yaml:"limit"`
	Window int `yaml:"window_seconds"`
}

// LoadConfig reads path (empty: defaults only) and applies the command line's overrides.
func LoadConfig(path, dataDir, listen string) (Config, error) {
	cfg := Config{Runner: runner.DefaultConfig(), Listen: DefaultListen}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return cfg, fmt.Errorf("config %s: %w", path, errdefs.ErrNotFound)
		}
		if err := decodeStrict(b, &cfg); err != nil {
			return cfg, fmt.Errorf("config %s: %w", path, err)
		}
	}
	if dataDir != "" {
		cfg.Runner.DataDir = dataDir
	}
	if listen != "" {
		cfg.Listen = listen
	}
	if cfg.SecretsKeyFile != "" && !filepath.IsAbs(cfg.SecretsKeyFile) {
		return cfg, fmt.Errorf("secrets_key_file: %q is not an absolute path: %w", cfg.SecretsKeyFile, errdefs.ErrInvalidArgument)
	}
	if err := cfg.Backup.check(); err != nil {
		return cfg, err
	}
	if err := cfg.Pool.Validate(); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	if err := checkPoolOnCluster(cfg.Pool, cfg.Runner); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	if _, _, err := net.SplitHostPort(cfg.Listen); err != nil {
		return cfg, fmt.Errorf("listen: %q is not host:port: %w", cfg.Listen, errdefs.ErrInvalidArgument)
	}
	if err := CheckStore(cfg.Store); err != nil {
		return cfg, err
	}
	if err := cfg.Replica.check(cfg.Store); err != nil {
		return cfg, err
	}
	if err := cfg.checkAccounts(); err != nil {
		return cfg, err
	}
	if cfg.ServicesURL == "" {
		cfg.ServicesURL = DefaultServicesURL
	}
	if err := checkServicesURL(cfg.ServicesURL); err != nil {
		return cfg, err
	}
	if _, err := origins.New(cfg.Origins()); err != nil {
		return cfg, err
	}
	rc, err := runner.LoadConfigFrom(cfg.Runner)
	if err != nil {
		return cfg, err
	}
	cfg.Runner = rc
	if cfg.Policy != "" {
		if err := sandboxops.CheckPolicyFile(cfg.Policy, cfg.Runner.MaxLimits); err != nil {
			return cfg, fmt.Errorf("policy: %w", err)
		}
	}
	return cfg, nil
}

// Origins is where the control plane and the apps hosts are.
func (c Config) Origins() origins.Config {
	return origins.Config{AppsDomain: c.AppsDomain, PublicURL: c.PublicURL}
}

// checkAccounts checks registration, tokens and metrics, and fills in the registration
// mode's default.
func (cfg *Config) checkAccounts() error {
	mode, err := auth.ParseRegistrationMode(cfg.Registration, cfg.Listen)
	if err != nil {
		return err
	}
	cfg.Registration = string(mode)
	t := cfg.Tokens
	switch {
	case t.DefaultTTL < 0 || t.MaxTTL < 0:
		return fmt.Errorf("tokens: lifetimes must be positive: %w", errdefs.ErrInvalidArgument)
	case t.DefaultTTL > 0 && t.DefaultTTL > cmp.Or(t.MaxTTL, auth.MaxTokenTTL):
		return fmt.Errorf("tokens.default_ttl: %s is over tokens.max_ttl %s: %w", t.DefaultTTL, cmp.Or(t.MaxTTL, auth.MaxTokenTTL), errdefs.ErrInvalidArgument)
	}
	if cfg.BrokerGrants.PerSecond < 0 || cfg.BrokerGrants.Burst < 0 {
		return fmt.Errorf("broker_grants: per_second and burst must not be negative: %w", errdefs.ErrInvalidArgument)
	}
	if f := cfg.Metrics.TokenFile; f != "" && !filepath.IsAbs(f) {
		return fmt.Errorf("metrics.token_file: %q is not an absolute path: %w", f, errdefs.ErrInvalidArgument)
	}
	if l := cfg.Metrics.Listen; l != "" {
		if _, _, err := net.SplitHostPort(l); err != nil {
			return fmt.Errorf("metrics.listen: %q is not host:port: %w", l, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

func decodeStrict(b []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument)
	}
	return nil
}

// checkServicesURL accepts what the agent will listen on: http on a loopback IP and a port.
func checkServicesURL(raw string) error {
	if _, err := wire.ServicesAddr("services_url", raw); err != nil {
		return fmt.Errorf("%v (a loopback address inside the sandbox): %w", err, errdefs.ErrInvalidArgument)
	}
	return nil
}
