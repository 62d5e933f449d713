package auth

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store"
)

// Client describes where a request came from, for rate limiting and the audit log.
type Client struct {
	Addr      netip.Addr
	UserAgent string
}

// ClientFromRequest takes the client's address from r.RemoteAddr. It deliberately
// ignores X-Forwarded-For: behind a reverse proxy, the edge must build Client from
// the header its own proxy sets, or every user shares the proxy's address.
func ClientFromRequest(r *http.Request) Client {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	addr := ap.Addr()
	if err != nil {
		addr, _ = netip.ParseAddr(r.RemoteAddr)
	}
	ua := r.UserAgent()
	if len(ua) > 256 {
		ua = ua[:256]
	}
	return Client{Addr: addr.Unmap(), UserAgent: ua}
}

// LimitedError is the answer to an attempt refused by rate limiting. It matches
// [errdefs.ErrLimitExceeded]; RetryAfter is when to try again (for Retry-After).
type LimitedError struct {
	RetryAfter time.Duration
	// What was limited ("failed sign-in attempts"), for the message.
	What string
}

func (e *LimitedError) Error() string {
	return fmt.Sprintf("too many %s: try again in %s", cmp.Or(e.What, "failed sign-in attempts"), e.RetryAfter)
}

// Unwrap places the error in the taxonomy.
func (e *LimitedError) Unwrap() error { return errdefs.ErrLimitExceeded }

// limitKey is one rate-limit bucket. A window bucket allows limit attempts per window.
// A backoff bucket allows limit attempts, then makes each further one wait twice as
// long after the one before (backoffBase, doubling, at most backoffMax), counting
// attempts within window.
type limitKey struct {
	key     string
	limit   int
	window  time.Duration
	backoff bool
}

// Backoff of one (account, address) pair past its free attempts.
const (
	backoffBase   = time.Second
	backoffMax    = 15 * time.Minute
	backoffWindow = 24 * time.Hour
)

// limitKeys returns the buckets an attempt on username from c counts against: the pair
// of the account and the address, with backoff, so that guessing at an account from one
// address slows down without locking its owner out from theirs; and the address alone,
// per window, which bounds guessing at many accounts from one address. An invalid
// username gets no pair bucket (no such account can exist, and the attacker-chosen
// string is not worth storing).
func (s *Service) limitKeys(username string, c Client) []limitKey {
	var keys []limitKey
	if CheckUsername(username) == nil {
		keys = append(keys, limitKey{key: pairKey(username, c.Addr), limit: s.cfg.accountLimit, window: backoffWindow, backoff: true})
	}
	return append(keys, limitKey{key: "ip:" + addrKey(c.Addr), limit: s.cfg.addressLimit, window: s.cfg.limitWindow})
}

// pairKey is the bucket of a (valid) username tried from an address; usernames are
// ASCII, so lowercasing matches the store's case-insensitive uniqueness.
func pairKey(username string, a netip.Addr) string {
	return "user:" + strings.ToLower(username) + "@" + addrKey(a)
}

// addrKey is the address bucket: an IPv4 address, or the /64 of an IPv6 address,
// since one IPv6 client typically owns a whole /64.
func addrKey(a netip.Addr) string {
	switch {
	case !a.IsValid():
		return "unknown"
	case a.Is4():
		return a.String()
	default:
		return netip.PrefixFrom(a.WithZone(""), 64).Masked().String()
	}
}

// attempt is an attempt counted against its buckets before the secret is checked;
// success un-counts it.
type attempt struct {
	keys []limitKey
	ids  []int64
}

// reserve counts an attempt against keys, or returns a *LimitedError (saying what)
// when a bucket is full. Checking and counting happen in one write transaction, so
// concurrent attempts cannot all pass the check before any is counted: an attacker gets
// exactly the allowance however many requests are in flight. The price: attempts still
// being checked count too, so more simultaneous correct logins than the allowance see
// some refused.
func (s *Service) reserve(ctx context.Context, keys []limitKey, what string) (*attempt, error) {
	now := s.now()
	a := &attempt{keys: keys}
	err := s.st.Update(ctx, func(tx *store.Tx) error {
		var wait time.Duration
		for _, k := range keys {
			w, err := k.wait(ctx, tx, now)
			if err != nil {
				return err
			}
			wait = max(wait, w)
		}
		if wait > 0 {
			return &LimitedError{RetryAfter: wait.Truncate(time.Second) + time.Second, What: what}
		}
		for _, k := range keys {
			id, err := tx.RecordLoginAttempt(ctx, k.key, now)
			if err != nil {
				return err
			}
			a.ids = append(a.ids, id)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// wait is how long an attempt at now must wait for bucket k.
func (k limitKey) wait(ctx context.Context, tx *store.Tx, now time.Time) (time.Duration, error) {
	since := now.Add(-k.window)
	if !k.backoff {
		at, err := tx.NthLatestLoginAttempt(ctx, k.key, since, k.limit)
		if err != nil || at.IsZero() {
			return 0, err
		}
		return at.Add(k.window).Sub(now), nil
	}
	n, latest, err := tx.LoginAttemptStats(ctx, k.key, since)
	if err != nil || n < k.limit {
		return 0, err
	}
	delay := backoffMax
	if over := n - k.limit; over < 20 {
		delay = min(backoffMax, backoffBase<<over)
	}
	return latest.Add(delay).Sub(now), nil
}

// succeeded un-counts a successful attempt inside tx and forgives the earlier failures
// of its account from its address (the address's own bucket keeps them: they may be
// guesses at other accounts).
func (a *attempt) succeeded(ctx context.Context, tx *store.Tx) error {
	for _, id := range a.ids {
		if err := tx.DeleteLoginAttempt(ctx, id); err != nil {
			return err
		}
	}
	for _, k := range a.keys {
		if k.backoff {
			if err := tx.ClearLoginAttempts(ctx, k.key); err != nil {
				return err
			}
		}
	}
	return nil
}

// failed records the audit event of a failed attempt (already counted) and returns
// ErrInvalidCredentials.
func (s *Service) failed(ctx context.Context, ev store.AuditEvent) error {
	if err := s.st.Update(ctx, func(tx *store.Tx) error { return tx.AppendAudit(ctx, ev) }); err != nil {
		return err
	}
	return ErrInvalidCredentials
}

// limited audits an attempt refused by rate limiting and passes its error on;
// other errors pass through.
func (s *Service) limited(ctx context.Context, action, username string, c Client, err error) error {
	var le *LimitedError
	if !errors.As(err, &le) {
		return err
	}
	pass, suppressed := s.gate.pass(action+":"+addrKey(c.Addr), s.now())
	if !pass {
		return err
	}
	detail := map[string]any{"ip": c.Addr.String(), "reason": "rate limited"}
	if suppressed > 0 {
		detail["suppressed"] = suppressed
	}
	ev := s.audit("", action, auditName(username), detail)
	if aerr := s.st.Update(ctx, func(tx *store.Tx) error { return tx.AppendAudit(ctx, ev) }); aerr != nil {
		return aerr
	}
	return err
}

// auditName is what the audit log records of an attempted username: the name when
// it is a valid username, otherwise a placeholder (a password pasted into the
// username field must not end up in the log).
func auditName(username string) string {
	if CheckUsername(username) != nil {
		return "(invalid username)"
	}
	return username
}

// Cleanup deletes expired sessions and login attempts too old to count. Run it
// periodically; nothing depends on it for correctness.
func (s *Service) Cleanup(ctx context.Context) error {
	now := s.now()
	defer s.sessions.invalidate()
	if _, err := s.st.DeleteExpiredSessions(ctx, now, now.Add(-s.cfg.idleTimeout)); err != nil {
		return err
	}
	_, err := s.st.PruneLoginAttempts(ctx, now.Add(-max(s.cfg.limitWindow, s.cfg.registerWindow, backoffWindow)))
	return err
}

// eventGate bounds the events of refusals that anyone may provoke without signing in:
// per key (what and from which address) at most one event per gateEvery, the next one
// counting those left out. A flood of refused requests then writes a few rows a minute,
// not one each.
type eventGate struct {
	mu   sync.Mutex
	keys map[string]*gateEntry
}

type gateEntry struct {
	at         time.Time
	suppressed int
}

const (
	gateEvery = 10 * time.Second
	gateKeys  = 10_000 // entries kept before old ones are dropped
)

// pass says whether the event for key at now is written, and how many were left out
// before it.
func (g *eventGate) pass(key string, now time.Time) (bool, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.keys == nil {
		g.keys = map[string]*gateEntry{}
	}
	e, ok := g.keys[key]
	if ok && now.Sub(e.at) < gateEvery {
		e.suppressed++
		return false, 0
	}
	if len(g.keys) >= gateKeys {
		for k, old := range g.keys {
			if now.Sub(old.at) >= gateEvery {
				delete(g.keys, k)
			}
		}
	}
	n := 0
	if ok {
		n = e.suppressed
	}
	g.keys[key] = &gateEntry{at: now}
	return true, n
}
