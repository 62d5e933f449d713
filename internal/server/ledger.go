package server

import (
	"context"
	"sync"
	"time"

	"github.com/paddockhq/paddock/internal/gateway"
	"github.com/paddockhq/paddock/internal/store"
)

// usageLedger is the provider gateway's token ledger (gateway.Ledger) kept in the store,
// so that a user's daily budget holds across restarts of the control plane. Today's counts
// are cached: each is read from the store once a day, and every Add writes through and
// caches the total the store returns (after the answer it counts has been relayed, so
// never on a request's path to its first byte).
// One mutex covers a count's read and every write, so that a read racing an Add cannot
// cache a count that misses it.
type usageLedger struct {
	st  *store.Store
	now func() time.Time

	mu    sync.Mutex
	day   time.Time // the UTC midnight the cache's counts are of
	spent map[usageKey]int64
}

type usageKey struct{ user, provider string }

var _ gateway.Ledger = (*usageLedger)(nil)

func newUsageLedger(st *store.Store, now func() time.Time) *usageLedger {
	if now == nil {
		now = time.Now
	}
	return &usageLedger{st: st, now: now, spent: map[usageKey]int64{}}
}

// usageKept is how many past days of counts the store keeps: the budget needs only today's,
// the rest is there for an operator to look at (the gateway.usage events hold the detail).
const usageKept = 31

// rollover starts a new day's cache, and prunes the store's old counts, when the UTC day
// has changed.
func (l *usageLedger) rollover(ctx context.Context) time.Time {
	d := utcMidnight(l.now())
	if !d.Equal(l.day) {
		l.day = d
		clear(l.spent)
		// Pruning is housekeeping: a failure leaves old rows for the next day's try.
		_ = l.st.PruneUsage(ctx, d.AddDate(0, 0, -usageKept))
	}
	return d
}

// Spent implements gateway.Ledger.
func (l *usageLedger) Spent(ctx context.Context, userID, provider string) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	day := l.rollover(ctx)
	k := usageKey{userID, provider}
	if n, ok := l.spent[k]; ok {
		return n, nil
	}
	n, err := l.st.Usage(ctx, userID, provider, day)
	if err != nil {
		return 0, err
	}
	l.spent[k] = n
	return n, nil
}

// Add implements gateway.Ledger.
func (l *usageLedger) Add(ctx context.Context, userID, provider string, tokens int64) error {
	if tokens <= 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	day := l.rollover(ctx)
	total, err := l.st.AddUsage(ctx, userID, provider, day, tokens)
	if err != nil {
		return err
	}
	l.spent[usageKey{userID, provider}] = total
	return nil
}

// utcMidnight is the start of t's UTC day.
func utcMidnight(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}
