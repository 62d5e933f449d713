package auth

import (
	"sync"
	"time"

	"github.com/paddockhq/paddock/internal/store"
)

// sessionCacheTTL is how long a verified session is served from memory. Every request a
// signed-in browser makes to its sandbox goes through [Service.Session], and a SQLite
// lookup per request is a large share of a proxied request's CPU (profile it with
// `go run ./internal/bench/cmd -only "proxy load" -cpuprofile`).
//
// Everything in this process that ends sessions (logout, recovery, a password change,
// the expiry sweep) clears the cache before it returns, so a revocation takes effect at
// once. Only a second process writing the same database (not supported: the control
// plane is one process on SQLite) could see a revocation up to sessionCacheTTL late.
const sessionCacheTTL = 2 * time.Second

// sessionCacheMax bounds the cache; past it the cache starts over.
const sessionCacheMax = 10000

type cachedSession struct {
	ss      store.Session
	u       store.User
	fetched time.Time
}

type sessionCache struct {
	mu      sync.Mutex
	gen     uint64 // bumped by every invalidation
	entries map[[32]byte]cachedSession
}

func (c *sessionCache) get(h []byte, now time.Time) (cachedSession, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[[32]byte(h)]
	if !ok || now.Sub(e.fetched) >= sessionCacheTTL || now.Before(e.fetched) {
		return cachedSession{}, false
	}
	return e, true
}

// generation is read before a lookup in the store; put stores the result only if no
// invalidation happened since, so that a lookup racing with a logout cannot bring the
// ended session back.
func (c *sessionCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

func (c *sessionCache) put(gen uint64, h []byte, e cachedSession) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if c.entries == nil || len(c.entries) >= sessionCacheMax {
		c.entries = make(map[[32]byte]cachedSession)
	}
	c.entries[[32]byte(h)] = e
}

// invalidate forgets every cached session.
func (c *sessionCache) invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.entries = nil
}
