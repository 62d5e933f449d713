package broker

import (
	"sync"
	"time"
)

// Denials are audited one by one only up to a rate per sandbox: a hostile sandbox asking
// for what it may not have, in a loop, must not fill the audit log (and the disk). Past
// the rate, a denial is still answered, with the same reason, and counted; the count is
// written as one "broker.deny_suppressed" event before the sandbox's next audited
// denial, or when its leases are revoked.
const (
	denyRate  = 20  // audited denials per second, per sandbox
	denyBurst = 100 // audited at once after a quiet spell
)

// denyLimiter is a token bucket per sandbox for audited denials.
type denyLimiter struct {
	mu      sync.Mutex
	buckets map[string]*denyBucket
}

type denyBucket struct {
	tokens     float64
	last       time.Time
	suppressed int
}

// take says whether a denial by sandbox at now is audited, and how many earlier denials
// went unaudited since the last one that was (to be written first).
func (l *denyLimiter) take(sandbox string, now time.Time) (audit bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buckets == nil {
		l.buckets = map[string]*denyBucket{}
	}
	b, ok := l.buckets[sandbox]
	if !ok {
		b = &denyBucket{tokens: denyBurst, last: now}
		l.buckets[sandbox] = b
	}
	b.tokens = min(denyBurst, b.tokens+now.Sub(b.last).Seconds()*denyRate)
	b.last = now
	if b.tokens < 1 {
		b.suppressed++
		return false, 0
	}
	b.tokens--
	suppressed, b.suppressed = b.suppressed, 0
	return true, suppressed
}

// forget drops a sandbox's bucket and returns its unwritten count.
func (l *denyLimiter) forget(sandbox string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[sandbox]
	if !ok {
		return 0
	}
	delete(l.buckets, sandbox)
	return b.suppressed
}
