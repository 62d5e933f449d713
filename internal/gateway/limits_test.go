package gateway

import (
	"testing"
	"time"
)

func TestMemoryLedger(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 3, 14, 23, 59, 0, 0, time.FixedZone("UTC+2", 2*3600))}
	l := NewMemoryLedger(clock.Now)
	ctx := t.Context()
	l.Add(ctx, "u", "openai", 10)
	l.Add(ctx, "u", "openai", 5)
	l.Add(ctx, "u", "anthropic", 7)
	l.Add(ctx, "v", "openai", 1)
	l.Add(ctx, "u", "openai", -3) // ignored
	for _, tc := range []struct {
		user, provider string
		want           int64
	}{{"u", "openai", 15}, {"u", "anthropic", 7}, {"v", "openai", 1}, {"w", "openai", 0}} {
		if got, _ := l.Spent(ctx, tc.user, tc.provider); got != tc.want {
			t.Errorf("%s on %s: %d, want %d", tc.user, tc.provider, got, tc.want)
		}
	}
	// 23:59 at UTC+2 is 21:59 UTC: two more minutes are the same UTC day.
	clock.Add(2 * time.Minute)
	if got, _ := l.Spent(ctx, "u", "openai"); got != 15 {
		t.Errorf("reset at local midnight: %d", got)
	}
	clock.Add(2 * time.Hour)
	if got, _ := l.Spent(ctx, "u", "openai"); got != 0 {
		t.Errorf("not reset at UTC midnight: %d", got)
	}
}

func TestRateLimiter(t *testing.T) {
	l := newRateLimiter()
	k := ledgerKey{"u", "p"}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 6 {
		if ok, _ := l.take(k, 6, now); !ok {
			t.Fatalf("request %d of a burst of 6 refused", i)
		}
	}
	ok, wait := l.take(k, 6, now)
	if ok || wait != 10*time.Second {
		t.Fatalf("7th: ok %v, wait %v; want a refusal and 10s", ok, wait)
	}
	if ok, wait := l.take(k, 6, now.Add(4*time.Second)); ok || wait != 6*time.Second {
		t.Fatalf("after 4 s: ok %v, wait %v; want 6s", ok, wait)
	}
	if ok, _ := l.take(k, 6, now.Add(10*time.Second)); !ok {
		t.Fatal("refused after the refill")
	}
	if ok, _ := l.take(ledgerKey{"other", "p"}, 6, now); !ok {
		t.Fatal("another user refused")
	}
	// Idle buckets are swept once full; the map does not grow with every user ever seen.
	l.take(ledgerKey{"late", "p"}, 6, now.Add(3*time.Minute))
	l.mu.Lock()
	n := len(l.buckets)
	l.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d buckets kept after a sweep, want 1", n)
	}
}
