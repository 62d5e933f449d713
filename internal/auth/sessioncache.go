package auth

import (
	"context"
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
// once. Replicas sharing a database are told of each other's revocations (ShareSessions),
// and one is answered only once every live replica has applied it.
const sessionCacheTTL = 2 * time.Second

// sessionCacheMax bounds the cache; past it the cache starts over.
const sessionCacheMax = 10000

// cachedSession is a verified session (ss), or API token (tok), with its user. The
// API tokens' cache is a second sessionCache, kept exact by the same notifications.
type cachedSession struct {
	ss      store.Session
	tok     store.APIToken
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

// forgetUser forgets userID's cached sessions.
func (c *sessionCache) forgetUser(userID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for h, e := range c.entries {
		if e.u.ID == userID {
			delete(c.entries, h)
		}
	}
}

// invalidate forgets every cached session.
func (c *sessionCache) invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.entries = nil
}

// Cluster is what the sessions' cache needs when replicas share the database: a change
// that ends sessions is numbered and notified to every replica in its transaction, and
// answered only once every live replica has applied it; a replica that may have missed
// one does not use its cache.
type Cluster interface {
	// NoteSessionsEnded notifies, when tx commits, that sessions of userID ended.
	NoteSessionsEnded(ctx context.Context, tx *store.Tx, userID string) (seq int64, err error)
	// WaitApplied returns once every other live replica has applied change seq.
	WaitApplied(ctx context.Context, seq int64)
	// CacheTrusted says whether this replica's caches may be used now.
	CacheTrusted() bool
}

// ShareSessions makes the sessions' cache exact across the replicas of c. Call it before
// serving.
func (s *Service) ShareSessions(c Cluster) { s.cluster = c }

// SessionsEnded applies a notification that sessions or API tokens of userID ended
// somewhere.
func (s *Service) SessionsEnded(userID string) {
	s.sessions.forgetUser(userID)
	s.tokens.forgetUser(userID)
}

// ForgetSessions empties the caches of sessions and tokens: notifications may have been
// missed.
func (s *Service) ForgetSessions() {
	s.sessions.invalidate()
	s.tokens.invalidate()
}

// noteSessionsEnded numbers and notifies, in tx, an end of userID's sessions (replicas).
func (s *Service) noteSessionsEnded(ctx context.Context, tx *store.Tx, userID string) (int64, error) {
	if s.cluster == nil {
		return 0, nil
	}
	return s.cluster.NoteSessionsEnded(ctx, tx, userID)
}

// sessionsEnded drops the ended sessions (or tokens) from this cache, then, if the change
// committed (err is nil), waits until every other replica has dropped them from its own:
// no replica serves them once this returns.
func (s *Service) sessionsEnded(ctx context.Context, seq int64, err error) {
	s.sessions.invalidate()
	s.tokens.invalidate()
	if s.cluster != nil && seq != 0 && err == nil {
		s.cluster.WaitApplied(ctx, seq)
	}
}

// cacheTrusted says whether the cache may answer (a replica's may not while its
// heartbeat lapsed).
func (s *Service) cacheTrusted() bool { return s.cluster == nil || s.cluster.CacheTrusted() }
