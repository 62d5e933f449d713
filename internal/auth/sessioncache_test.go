package auth

import (
	"errors"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/store"
)

// A lookup that read the store before a logout must not put the ended session back.
func TestSessionCacheIgnoresPutsFromBeforeAnInvalidation(t *testing.T) {
	var c sessionCache
	h := make([]byte, 32)
	now := time.Now()
	gen := c.generation()
	c.invalidate() // a logout commits while the lookup is in flight
	c.put(gen, h, cachedSession{ss: store.Session{UserID: "u"}, fetched: now})
	if _, ok := c.get(h, now); ok {
		t.Fatal("a session read before the invalidation was cached after it")
	}
	c.put(c.generation(), h, cachedSession{fetched: now})
	if _, ok := c.get(h, now); !ok {
		t.Fatal("a fresh lookup was not cached")
	}
	if _, ok := c.get(h, now.Add(sessionCacheTTL)); ok {
		t.Error("an entry outlived sessionCacheTTL")
	}
	if _, ok := c.get(h, now.Add(-time.Second)); ok {
		t.Error("an entry from the future (a clock stepped back) was served")
	}
}

// A cached session is checked against its expiry on every use: past it, the cache
// refuses it while the entry is still fresh and the store still has its row.
func TestSessionExpiredRefusedFromCache(t *testing.T) {
	e := newEnv(t, WithSessionLifetime(time.Hour, time.Second))
	e.register(t, "alice")
	sess := e.login(t, "alice")
	ctx := t.Context()
	if _, err := e.svc.Session(ctx, sess.ID); err != nil {
		t.Fatalf("a fresh session: %v", err)
	}
	e.clk.advance(time.Second)
	if _, ok := e.svc.sessions.get(sessionHash(sess.ID), e.clk.now()); !ok {
		t.Fatal("the session's entry left the cache: this test would not read it from there")
	}
	if _, err := e.svc.Session(ctx, sess.ID); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("a session at its expiry, from the cache: %v, want ErrUnauthenticated", err)
	}
}

// A notification that a user's sessions ended drops that user's entries, and no other's.
func TestSessionCacheForgetsOneUser(t *testing.T) {
	var c sessionCache
	now := time.Now()
	a, b := make([]byte, 32), make([]byte, 32)
	b[0] = 1
	c.put(c.generation(), a, cachedSession{u: store.User{ID: "alice"}, fetched: now})
	c.put(c.generation(), b, cachedSession{u: store.User{ID: "bob"}, fetched: now})
	gen := c.generation()
	c.forgetUser("alice")
	if _, ok := c.get(a, now); ok {
		t.Error("alice's session outlived the notification that her sessions ended")
	}
	if _, ok := c.get(b, now); !ok {
		t.Error("bob's session left the cache with alice's")
	}
	if c.put(gen, a, cachedSession{u: store.User{ID: "alice"}, fetched: now}); func() bool { _, ok := c.get(a, now); return ok }() {
		t.Error("a lookup begun before the notification was cached after it")
	}
}

// An API token is served from the cache for up to sessionCacheTTL: a revocation the
// service did not see (another process's, with no notification) shows once the entry
// is read again. One made through the service is refused at once, and so is one a
// notification names; the expiry is checked against the cached record on every use.
func TestTokenCache(t *testing.T) {
	e := newEnv(t)
	alice := e.register(t, "alice")
	ctx := t.Context()
	tok, info, err := e.svc.CreateAPIToken(ctx, alice.User, TokenSpec{Name: "cli", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.svc.AuthenticateToken(ctx, tok); err != nil {
		t.Fatalf("a fresh token: %v", err)
	}
	revokeUnseen := func() {
		t.Helper()
		err := e.st.Update(ctx, func(tx *store.Tx) error { return tx.RevokeAPIToken(ctx, alice.User.ID, info.ID, e.clk.now()) })
		if err != nil {
			t.Fatal(err)
		}
	}
	revokeUnseen()
	if _, _, err := e.svc.AuthenticateToken(ctx, tok); err != nil {
		t.Errorf("a cached token right after an unseen revocation: %v, want it served from the cache", err)
	}
	e.clk.advance(sessionCacheTTL)
	if _, _, err := e.svc.AuthenticateToken(ctx, tok); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("the token once its entry is read again: %v, want ErrUnauthenticated", err)
	}

	tok, info, _ = e.svc.CreateAPIToken(ctx, alice.User, TokenSpec{Name: "two", TTL: time.Hour})
	e.svc.AuthenticateToken(ctx, tok)
	if err := e.svc.RevokeAPIToken(ctx, alice.User.ID, info.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.svc.AuthenticateToken(ctx, tok); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("a cached token revoked through the service: %v, want ErrUnauthenticated", err)
	}

	tok, info, _ = e.svc.CreateAPIToken(ctx, alice.User, TokenSpec{Name: "three", TTL: time.Hour})
	e.svc.AuthenticateToken(ctx, tok)
	revokeUnseen()
	e.svc.SessionsEnded(alice.User.ID) // the notification of another replica's revocation
	if _, _, err := e.svc.AuthenticateToken(ctx, tok); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("a cached token after a notification for its user: %v, want ErrUnauthenticated", err)
	}

	tok, _, _ = e.svc.CreateAPIToken(ctx, alice.User, TokenSpec{Name: "four", TTL: sessionCacheTTL / 2})
	e.svc.AuthenticateToken(ctx, tok)
	e.clk.advance(sessionCacheTTL / 2)
	if _, _, err := e.svc.AuthenticateToken(ctx, tok); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("a cached token at its expiry: %v, want ErrUnauthenticated", err)
	}
}
