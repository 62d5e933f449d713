package gateway

import (
	"context"
	"math"
	"sync"
	"time"
)

// Ledger keeps how many tokens each user has spent on each provider today (since the last
// 00:00 UTC): the gateway asks it before forwarding a request to a provider with a daily
// budget and tells it what every answer used. Errors should wrap errdefs sentinels; the
// gateway refuses requests (503) while Spent fails rather than let spending run unchecked.
type Ledger interface {
	// Spent returns the tokens userID has spent on provider today.
	Spent(ctx context.Context, userID, provider string) (int64, error)
	// Add counts tokens that userID just spent on provider.
	Add(ctx context.Context, userID, provider string, tokens int64) error
}

var _ Ledger = (*MemoryLedger)(nil)

// MemoryLedger is a Ledger held in memory: counts start again at every UTC midnight, and
// are lost when `paddock serve` restarts, which gives every user a fresh budget. It is
// the default until the control plane keeps budgets in its store.
type MemoryLedger struct {
	now   func() time.Time
	mu    sync.Mutex
	day   time.Time // the UTC midnight the counts began
	spent map[ledgerKey]int64
}

type ledgerKey struct{ user, provider string }

// NewMemoryLedger returns an empty MemoryLedger that reads the time from now (time.Now
// when nil).
func NewMemoryLedger(now func() time.Time) *MemoryLedger {
	if now == nil {
		now = time.Now
	}
	return &MemoryLedger{now: now, spent: map[ledgerKey]int64{}}
}

// Spent implements Ledger.
func (l *MemoryLedger) Spent(_ context.Context, userID, provider string) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rollover()
	return l.spent[ledgerKey{userID, provider}], nil
}

// Add implements Ledger.
func (l *MemoryLedger) Add(_ context.Context, userID, provider string, tokens int64) error {
	if tokens <= 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rollover()
	k := ledgerKey{userID, provider}
	l.spent[k] = satAdd(l.spent[k], tokens)
	return nil
}

// rollover forgets yesterday's counts.
func (l *MemoryLedger) rollover() {
	if d := midnight(l.now()); !d.Equal(l.day) {
		l.day = d
		clear(l.spent)
	}
}

// midnight is the start of t's UTC day.
func midnight(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// nextMidnight is when the UTC day after t's starts: when daily budgets reset.
func nextMidnight(t time.Time) time.Time { return midnight(t).AddDate(0, 0, 1) }

// Rates keeps the users' request buckets, one per user and provider. The gateway keeps
// them in memory unless given one that shares them (the replicas' store).
type Rates interface {
	// Take spends one request of userID's bucket on provider at now (see Bucket.Take).
	// Errors should wrap errdefs sentinels; the gateway refuses requests (503) while
	// Take fails.
	Take(ctx context.Context, userID, provider string, perMinute int, now time.Time) (ok bool, wait time.Duration, err error)
}

// Bucket is one user's token bucket on one provider: it holds up to perMinute requests
// and refills at perMinute per minute, so a user may burst a minute's worth at once and
// then goes at the steady rate. The zero Bucket is a new one: full.
type Bucket struct {
	Tokens float64
	Last   time.Time
}

// Take refills b up to now and spends one request of it, or says how long until one is
// available.
func (b *Bucket) Take(perMinute int, now time.Time) (ok bool, wait time.Duration) {
	if b.Last.IsZero() {
		b.Tokens, b.Last = float64(perMinute), now
	}
	if el := now.Sub(b.Last); el > 0 {
		b.Tokens = math.Min(float64(perMinute), b.Tokens+float64(el)*float64(perMinute)/float64(time.Minute))
		b.Last = now
	}
	if b.Tokens >= 1 {
		b.Tokens--
		return true, 0
	}
	return false, time.Duration(math.Ceil((1 - b.Tokens) * float64(time.Minute) / float64(perMinute)))
}

var _ Rates = (*rateLimiter)(nil)

// rateLimiter holds the buckets in memory, by user and provider.
type rateLimiter struct {
	mu        sync.Mutex
	buckets   map[ledgerKey]*Bucket
	lastSweep time.Time
}

func newRateLimiter() *rateLimiter { return &rateLimiter{buckets: map[ledgerKey]*Bucket{}} }

// Take implements Rates.
func (l *rateLimiter) Take(_ context.Context, userID, provider string, perMinute int, now time.Time) (bool, time.Duration, error) {
	ok, wait := l.take(ledgerKey{userID, provider}, perMinute, now)
	return ok, wait, nil
}

// take spends one request of k's bucket at now, or says how long until one is available.
func (l *rateLimiter) take(k ledgerKey, perMinute int, now time.Time) (ok bool, wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	b := l.buckets[k]
	if b == nil {
		b = &Bucket{}
		l.buckets[k] = b
	}
	return b.Take(perMinute, now)
}

// sweep drops, once a minute, the buckets that have had a minute to refill: they are
// full again and the same as no bucket, so the map holds only users active lately.
func (l *rateLimiter) sweep(now time.Time) {
	if now.Sub(l.lastSweep) < time.Minute {
		return
	}
	l.lastSweep = now
	for k, b := range l.buckets {
		if now.Sub(b.Last) >= time.Minute {
			delete(l.buckets, k)
		}
	}
}
