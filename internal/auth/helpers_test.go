package auth

import (
	"context"
	"fmt"
	"github.com/paddockhq/paddock/internal/errdefs"
	"log/slog"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/store"
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
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "paddock.db"))
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
