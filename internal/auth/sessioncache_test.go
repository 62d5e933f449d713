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
