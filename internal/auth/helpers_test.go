package auth

import (
	"context"
	"fmt"
	"github.com/paddockhq/paddock/internal/errdefs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/store/pgtest"
)

// cheap are Argon2id parameters fast enough for tests; the format is identical.
var cheap = Params{Memory: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

type env struct {
	st  *store.Store
	svc *Service
	clk *clock
}

func newEnv(t *testing.T, opts ...Option) *env {
	t.Helper()
	return newEnvOn(t, filepath.Join(t.TempDir(), "paddock.db"), opts...)
}

// newEnvOn is newEnv on the store at target.
func newEnvOn(t *testing.T, target string, opts ...Option) *env {
	t.Helper()
	st, err := store.Open(context.Background(), target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := &clock{t: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)}
	opts = append([]Option{WithParams(cheap), WithClock(clk.now), WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	return &env{st: st, svc: New(st, opts...), clk: clk}
}

var (
	home  = Client{Addr: netip.MustParseAddr("192.0.2.10"), UserAgent: "test"}
	other = Client{Addr: netip.MustParseAddr("198.51.100.7"), UserAgent: "test"}
)

const goodPassword = Password("correct horse battery staple")

func (e *env) register(t *testing.T, name string) *Registration {
	t.Helper()
	reg, err := e.svc.Register(context.Background(), RegisterRequest{Username: name, Password: goodPassword, Client: home})
	if err != nil {
		t.Fatalf("register %s: %v", name, err)
	}
	return reg
}

func (e *env) login(t *testing.T, name string) *Session {
	t.Helper()
	sess, err := e.svc.Login(context.Background(), LoginRequest{Username: name, Password: goodPassword, Client: home})
	if err != nil {
		t.Fatalf("login %s: %v", name, err)
	}
	return sess
}

func sprint(v any) string { return fmt.Sprint(v) }

var (
	errNotFound = errdefs.ErrNotFound
	errInvalid  = errdefs.ErrInvalidArgument
)

// TestMain stops the PostgreSQL server the tests started, if any.
func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Stop()
	os.Exit(code)
}

// eachStore runs f with an env on each backend: SQLite and PostgreSQL (skipped, saying
// so, only when PostgreSQL is not installed).
func eachStore(t *testing.T, f func(t *testing.T, e *env), opts ...Option) {
	t.Run("sqlite", func(t *testing.T) { f(t, newEnv(t, opts...)) })
	t.Run("postgres", func(t *testing.T) { f(t, newEnvOn(t, pgtest.URL(t), opts...)) })
}
