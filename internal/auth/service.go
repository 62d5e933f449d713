package auth

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store"
)

// Errors callers map at the edge. Each wraps an errdefs sentinel, so the HTTP layer
// answers 401 for ErrInvalidCredentials and ErrUnauthenticated and 403 for ErrCSRF.
var (
	// ErrInvalidCredentials is the one answer to a wrong username, a wrong password
	// and a wrong or used recovery code, so that none reveals which part was wrong.
	ErrInvalidCredentials = fmt.Errorf("invalid username or password: %w", errdefs.ErrUnauthenticated)
	// ErrUnauthenticated means no valid session or token: missing, malformed,
	// unknown, expired or revoked, without saying which.
	ErrUnauthenticated = fmt.Errorf("not signed in, or the session or token has expired or been revoked: %w", errdefs.ErrUnauthenticated)
	// ErrCSRF means a state-changing browser request failed the CSRF checks.
	ErrCSRF = fmt.Errorf("request refused by CSRF protection: reload the page and try again: %w", errdefs.ErrPermissionDenied)
)

// Token lifetimes unless configured (WithTokenLifetime).
const (
	DefaultTokenTTL = 30 * 24 * time.Hour
	MaxTokenTTL     = 365 * 24 * time.Hour
)

// Service implements authentication on a store. It is safe for concurrent use.
type Service struct {
	st  *store.Store
	cfg config

	hashSem   chan struct{} // bounds concurrent Argon2 work (memory)
	dummyOnce sync.Once
	dummy     string // a hash of nothing, verified for unknown users

	copOnce sync.Once
	copProt *http.CrossOriginProtection

	sessions sessionCache
	tokens   sessionCache // API tokens, by their hash
	cluster  Cluster      // set by ShareSessions, or nil
	gate     eventGate    // bounds anonymous refusals' events
}

type config struct {
	params         Params
	now            func() time.Time
	idleTimeout    time.Duration
	absoluteTTL    time.Duration
	touchEvery     time.Duration
	accountLimit   int
	addressLimit   int
	limitWindow    time.Duration
	forceSecure    bool
	trustedOrigins map[string]bool
	log            *slog.Logger

	tokenDefaultTTL time.Duration
	tokenMaxTTL     time.Duration

	registration   RegistrationMode
	registerLimit  int
	registerWindow time.Duration
}

// Option configures a Service.
type Option func(*config)

// WithParams sets the Argon2id parameters for new hashes (tests use cheap ones).
func WithParams(p Params) Option { return func(c *config) { c.params = p } }

// WithClock sets the time source (tests).
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// WithSessionLifetime sets the idle timeout (default 24h) and the absolute lifetime
// (default 7 days) of sessions.
func WithSessionLifetime(idle, absolute time.Duration) Option {
	return func(c *config) { c.idleTimeout, c.absoluteTTL = idle, absolute }
}

// WithLoginLimits sets how many failed logins one account may have from one client
// address before each further one waits, doubling from a second up to 15 minutes
// (default 5), and how many failed logins one address may have within window, whatever
// the accounts (defaults 20, 15 minutes).
func WithLoginLimits(perAccount, perAddress int, window time.Duration) Option {
	return func(c *config) { c.accountLimit, c.addressLimit, c.limitWindow = perAccount, perAddress, window }
}

// WithRegistration sets who may register at the public page (default open; the
// server passes its config's mode).
func WithRegistration(m RegistrationMode) Option { return func(c *config) { c.registration = m } }

// WithRegistrationLimit sets how many registrations one client address may attempt
// within window (default 10 per hour).
func WithRegistrationLimit(n int, window time.Duration) Option {
	return func(c *config) { c.registerLimit, c.registerWindow = n, window }
}

// WithTokenLifetime sets an API token's default lifetime (default 30 days) and the
// longest one a request may ask for (default 365 days).
func WithTokenLifetime(def, max time.Duration) Option {
	return func(c *config) { c.tokenDefaultTTL, c.tokenMaxTTL = def, max }
}

// WithSecureCookies makes cookies Secure and __Host- prefixed even on plain-http
// requests: for a control plane behind a TLS-terminating proxy.
func WithSecureCookies() Option { return func(c *config) { c.forceSecure = true } }

// WithTrustedOrigins adds origins ("https://paddock.example.com") whose browser
// requests pass the CSRF origin check besides the request's own host.
func WithTrustedOrigins(origins ...string) Option {
	return func(c *config) {
		for _, o := range origins {
			c.trustedOrigins[o] = true
		}
	}
}

// WithLogger sets the logger for failures that do not fail the request (a failed
// last-seen update).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// New returns a Service on st.
func New(st *store.Store, opts ...Option) *Service {
	c := config{
		params:         DefaultParams,
		now:            time.Now,
		idleTimeout:    24 * time.Hour,
		absoluteTTL:    7 * 24 * time.Hour,
		touchEvery:     time.Minute,
		accountLimit:   5,
		addressLimit:   20,
		limitWindow:    15 * time.Minute,
		trustedOrigins: map[string]bool{},
		log:            slog.Default(),

		tokenDefaultTTL: DefaultTokenTTL,
		tokenMaxTTL:     MaxTokenTTL,

		registration:   RegistrationOpen,
		registerLimit:  10,
		registerWindow: time.Hour,
	}
	for _, o := range opts {
		o(&c)
	}
	return &Service{st: st, cfg: c, hashSem: make(chan struct{}, max(2, runtime.GOMAXPROCS(0)))}
}

func (s *Service) now() time.Time { return s.cfg.now().UTC() }

// acquire waits for a hashing slot, or for ctx.
func (s *Service) acquire(ctx context.Context) (release func(), err error) {
	select {
	case s.hashSem <- struct{}{}:
		return func() { <-s.hashSem }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting to hash a password: %w", errdefs.ErrUnavailable)
	}
}

// hash hashes pw under the concurrency cap.
func (s *Service) hash(ctx context.Context, pw Password) (string, error) {
	release, err := s.acquire(ctx)
	if err != nil {
		return "", err
	}
	defer release()
	return HashPassword(pw, s.cfg.params), nil
}

// verify checks pw against encoded under the concurrency cap. An empty encoded
// (unknown user) verifies against a dummy hash and fails, taking as long.
func (s *Service) verify(ctx context.Context, encoded string, pw Password) (bool, error) {
	known := encoded != ""
	if !known {
		s.dummyOnce.Do(func() { s.dummy = HashPassword("paddock dummy password", s.cfg.params) })
		encoded = s.dummy
	}
	release, err := s.acquire(ctx)
	if err != nil {
		return false, err
	}
	defer release()
	ok, err := VerifyPassword(encoded, pw)
	if err != nil {
		// A corrupt stored hash: the account cannot sign in until recovered, and the
		// caller answers exactly as for a wrong password.
		s.cfg.log.ErrorContext(ctx, "stored password hash is unusable", "err", err)
		return false, nil
	}
	return ok && known, nil
}

// audit builds an audit event stamped now.
func (s *Service) audit(actor, action, target string, detail map[string]any) store.AuditEvent {
	return store.AuditEvent{At: s.now(), ActorUserID: actor, Action: action, Target: target, Detail: detail}
}
