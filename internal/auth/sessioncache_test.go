package auth

import (
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
