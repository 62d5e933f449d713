package broker

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
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
	bucket
	suppressed int
}

// bucket is one sandbox's token bucket.
type bucket struct {
	tokens float64
	last   time.Time // zero: never used, full
}

// spend refills b at rate, up to burst, for the time since its last use and spends one
// token; when there is none it returns how long until there is.
func (b *bucket) spend(now time.Time, rate, burst float64) (wait time.Duration) {
	if b.last.IsZero() {
		b.tokens = burst
	} else {
		b.tokens = min(burst, b.tokens+now.Sub(b.last).Seconds()*rate)
	}
	b.last = now
	if b.tokens < 1 {
		return time.Duration((1 - b.tokens) / rate * float64(time.Second))
	}
	b.tokens--
	return 0
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
		b = &denyBucket{}
		l.buckets[sandbox] = b
	}
	if b.spend(now, denyRate, denyBurst) > 0 {
		b.suppressed++
		return false, 0
	}
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

// Grants (resolves and renewals the policy allows) are limited per sandbox: each is a
// lease row and an audit event committed to the control plane's database, and a sandbox
// asking in a loop must not grow it without bound. Past the rate the request is refused
// with 429 and Retry-After, and the refusal is a denial like any other (audited at the
// denials' rate).
const (
	grantRate  = 5  // grants per second, per sandbox (default)
	grantBurst = 50 // granted at once after a quiet spell (default)
)

// grantLimiter is a token bucket per sandbox for grants.
type grantLimiter struct {
	mu          sync.Mutex
	rate, burst float64 // zero: the defaults
	buckets     map[string]*bucket
}

// set changes the rate and burst (zero: the defaults).
func (l *grantLimiter) set(rate, burst int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rate, l.burst = float64(rate), float64(burst)
}

func (l *grantLimiter) limits() (rate, burst float64) {
	if rate, burst = l.rate, l.burst; rate <= 0 {
		rate = grantRate
	}
	if burst <= 0 {
		burst = grantBurst
	}
	return rate, max(burst, 1)
}

// take spends one grant of sandbox at now; when there is none left it returns how long
// until there is.
func (l *grantLimiter) take(sandbox string, now time.Time) (wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buckets == nil {
		l.buckets = map[string]*bucket{}
	}
	b, ok := l.buckets[sandbox]
	if !ok {
		b = &bucket{}
		l.buckets[sandbox] = b
	}
	rate, burst := l.limits()
	return b.spend(now, rate, burst)
}

// forget drops a sandbox's bucket.
func (l *grantLimiter) forget(sandbox string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.buckets, sandbox)
}

// LimitedError is a grant refused by the per-sandbox rate. It matches
// [errdefs.ErrLimitExceeded]; RetryAfter is for the Retry-After header.
type LimitedError struct {
	Action     string // resolve or renew
	Capability string
	Rate       int // grants a second allowed
	RetryAfter time.Duration
}

func (e *LimitedError) Error() string {
	return fmt.Sprintf("capability %s: %s refused: more than %d grants a second from this sandbox (broker_grants.per_second); try again in %s",
		e.Capability, e.Action, e.Rate, e.RetryAfter.Round(time.Millisecond))
}

// Unwrap places the error in the taxonomy.
func (e *LimitedError) Unwrap() error { return errdefs.ErrLimitExceeded }

// retryAfterSeconds is d rounded up to whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) string {
	return strconv.Itoa(max(1, int((d+time.Second-1)/time.Second)))
}
