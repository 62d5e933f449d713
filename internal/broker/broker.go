// Package broker is the secrets broker: a sandbox asks it for a capability ("github") and,
// when the broker's policy grants that capability to the sandbox's user (and role), gets
// the value of one of the user's secrets as a lease with a lifetime. Sandboxes never name a
// secret or a storage path, and never see any platform secret.
//
// # Threat model
//
// The caller is a process in a sandbox, and hostile. Its identity is the sandbox whose
// agent channel the request arrived on, which the control plane's code puts in the request
// context (WithSandbox) before the broker sees it: nothing the caller writes names the
// sandbox, its user or its role. The user and role are looked up at each request, so that
// a promotion or a stop takes effect at once. Every decision, allow or deny, is an audit
// event with the user, the sandbox, the capability, the time, the outcome and the reason:
// never the value, nor anything derived from it. Leases are recorded (without values), so
// that a forged, foreign, expired or revoked lease is refused, and stopping a sandbox
// revokes all of its leases. A value already handed out cannot be taken back from the
// sandbox: the lease's lifetime is what the sandbox is told to keep it for, and renewals
// after a revocation are refused.
package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/brokerclient"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store"
)

// Identity is who a sandbox belongs to, as the control plane knows it.
type Identity struct {
	UserID, Username string
	// Role is "live" or "dev" while a role points at the sandbox, "" otherwise.
	Role string
	// Running is false once the sandbox has been stopped.
	Running bool
}

// Sandboxes tells the broker about a sandbox.
type Sandboxes interface {
	Identify(ctx context.Context, sandboxID string) (Identity, error)
}

// Secrets reveals a user's secret; an unset one is errdefs.ErrNotFound.
type Secrets interface {
	Reveal(ctx context.Context, userID, name string) ([]byte, error)
}

// Broker resolves capabilities. It is safe for concurrent use.
type Broker struct {
	st        *store.Store
	sandboxes Sandboxes
	secrets   Secrets
	policy    atomic.Pointer[Policy]
	log       *slog.Logger
	now       func() time.Time
	decisions *prometheus.CounterVec
	commits   *committer
	denials   denyLimiter
	grants    grantLimiter
}

// New returns a Broker deciding by p (nil: deny everything).
func New(st *store.Store, sb Sandboxes, sec Secrets, p *Policy, reg prometheus.Registerer, log *slog.Logger) (*Broker, error) {
	b := &Broker{st: st, sandboxes: sb, secrets: sec, log: log, now: time.Now, commits: newCommitter(st),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paddock_broker_decisions_total",
			Help: "Decisions of the secrets broker, by action (resolve, renew, revoke) and outcome (allow, deny).",
		}, []string{"action", "decision"}),
	}
	if err := reg.Register(b.decisions); err != nil {
		return nil, fmt.Errorf("broker metrics: %w", err)
	}
	b.SetPolicy(p)
	return b, nil
}

// Close stops the broker's writer; decisions after it fail as unavailable.
func (b *Broker) Close() { b.commits.close() }

// SetPolicy replaces the policy; requests already deciding finish under the old one.
func (b *Broker) SetPolicy(p *Policy) {
	if p == nil {
		p = &Policy{}
	}
	b.policy.Store(p)
}

// SetGrantLimit sets how many grants (resolves and renewals) one sandbox may have a
// second, and at once after a quiet spell; zero keeps the default (5 and 50).
func (b *Broker) SetGrantLimit(perSecond, burst int) { b.grants.set(perSecond, burst) }

func (b *Broker) limitedError(action, capability string, wait time.Duration) error {
	rate, _ := b.grants.limits()
	return &LimitedError{Action: action, Capability: capability, Rate: int(rate), RetryAfter: wait}
}

type sandboxKey struct{}

// WithSandbox records in ctx the sandbox whose channel a request arrived on.
func WithSandbox(ctx context.Context, sandboxID string) context.Context {
	return context.WithValue(ctx, sandboxKey{}, sandboxID)
}

// SandboxFrom returns the sandbox WithSandbox recorded.
func SandboxFrom(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(sandboxKey{}).(string)
	return id, ok && id != ""
}

// Grant is a capability granted: the value, and the lease it is held under.
type Grant struct {
	LeaseID    string
	Capability string
	Secret     string
	Value      Value
	ExpiresAt  time.Time
}

// Value is a secret value on its way to a sandbox. It prints as a redaction, so that a
// Grant logged by mistake shows nothing.
type Value []byte

func (Value) String() string               { return "[redacted]" }
func (Value) GoString() string             { return "[redacted]" }
func (Value) LogValue() slog.Value         { return slog.StringValue("[redacted]") }
func (Value) Format(f fmt.State, _ rune)   { _, _ = f.Write([]byte("[redacted]")) }
func (Value) MarshalJSON() ([]byte, error) { return []byte(`"[redacted]"`), nil }

// decision is one audited outcome.
type decision struct {
	action, capability, leaseID, reason string
	allow                               bool
}

// Resolve grants capability to sandboxID, or says why not.
func (b *Broker) Resolve(ctx context.Context, sandboxID, capability string) (Grant, error) {
	d := decision{action: "resolve", capability: capability}
	id, err := b.identify(ctx, sandboxID)
	if err != nil {
		return Grant{}, b.deny(ctx, Identity{}, sandboxID, d, err)
	}
	if !capabilityName.MatchString(capability) {
		return Grant{}, b.deny(ctx, id, sandboxID, d, fmt.Errorf("capability %q: a capability name is 1-64 characters of a-z, 0-9, '_', '.', '-': %w", capability, errdefs.ErrInvalidArgument))
	}
	c, why, ok := b.policy.Load().decide(capability, id.Username, id.Role)
	if !ok {
		return Grant{}, b.deny(ctx, id, sandboxID, d, fmt.Errorf("capability %s: %s: %w", capability, why, errdefs.ErrPermissionDenied))
	}
	if wait := b.grants.take(sandboxID, b.now()); wait > 0 {
		return Grant{}, b.deny(ctx, id, sandboxID, d, b.limitedError(d.action, capability, wait))
	}
	var value []byte
	var secret string
	for _, name := range c.Secrets {
		v, err := b.secrets.Reveal(ctx, id.UserID, name)
		if errors.Is(err, errdefs.ErrNotFound) {
			continue
		}
		if err != nil {
			return Grant{}, b.deny(ctx, id, sandboxID, d, fmt.Errorf("capability %s: secret %s cannot be read: %w", capability, name, err))
		}
		value, secret = v, name
		break
	}
	if secret == "" {
		return Grant{}, b.deny(ctx, id, sandboxID, d, fmt.Errorf("capability %s: the user has set none of its secrets (%v): %w", capability, c.Secrets, errdefs.ErrFailedPrecondition))
	}
	g, err := b.grant(ctx, id, sandboxID, capability, secret, c.ttl())
	if err != nil {
		return Grant{}, err
	}
	g.Value = value
	b.decisions.WithLabelValues(d.action, "allow").Inc()
	return g, nil
}

// grant records a grant of secret to sandboxID for ttl: its lease and its audit event, in
// one durable write shared with the grants that arrive together.
func (b *Broker) grant(ctx context.Context, id Identity, sandboxID, capability, secret string, ttl time.Duration) (Grant, error) {
	now := b.now()
	g := Grant{LeaseID: newLeaseID(now), Capability: capability, Secret: secret, ExpiresAt: now.Add(ttl)}
	d := decision{action: "resolve", capability: capability, allow: true, leaseID: g.LeaseID, reason: "granted " + secret + " for " + ttl.String()}
	err := b.commits.write(func(tx *store.Tx) error {
		if err := tx.CreateLease(ctx, store.Lease{ID: g.LeaseID, UserID: id.UserID, SandboxID: sandboxID,
			Capability: capability, SecretName: secret, IssuedAt: now, ExpiresAt: g.ExpiresAt}); err != nil {
			return err
		}
		return tx.AppendAudit(ctx, b.audit(id, sandboxID, d, now))
	})
	if err != nil {
		return Grant{}, fmt.Errorf("capability %s: record the lease: %w", capability, err)
	}
	return g, nil
}

// RecordGrant writes what Resolve writes for a grant (a lease and its audit event, through
// the same group commit) and nothing more: no policy, no secret, no caller to identify.
// The bench times it alone as the storage floor of a resolution.
func (b *Broker) RecordGrant(ctx context.Context, userID, sandboxID, capability, secret string, ttl time.Duration) error {
	_, err := b.grant(ctx, Identity{UserID: userID}, sandboxID, capability, secret, ttl)
	return err
}

// newLeaseID is ls- and 32 hex digits: the grant's time in milliseconds (12 digits), then 80
// random bits. Time first keeps the leases table's primary key appending at its end, so a
// batch of new leases writes a few pages rather than one random page each. A lease ID is
// not a credential (only the sandbox it was granted to may use it), so 80 random bits are
// plenty to keep IDs from colliding.
func newLeaseID(now time.Time) string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("ls-%012x%s", uint64(now.UnixMilli())&(1<<48-1), hex.EncodeToString(b[:]))
}

// leaseID is the shape of a lease ID; anything else is refused before a look-up.
var leaseID = regexp.MustCompile(`^ls-[0-9a-f]{32}$`)

// Renew extends a standing lease of sandboxID by its capability's lifetime, if the policy
// still grants the capability. It returns the grant without its value.
func (b *Broker) Renew(ctx context.Context, sandboxID, lease string) (Grant, error) {
	d := decision{action: "renew", leaseID: lease}
	id, l, err := b.lease(ctx, sandboxID, lease)
	d.capability = l.Capability
	if err != nil {
		return Grant{}, b.deny(ctx, id, sandboxID, d, err)
	}
	c, why, ok := b.policy.Load().decide(l.Capability, id.Username, id.Role)
	if !ok || !slices.Contains(c.Secrets, l.SecretName) {
		if ok {
			why = "the policy no longer maps the capability to secret " + l.SecretName
		}
		return Grant{}, b.deny(ctx, id, sandboxID, d, fmt.Errorf("lease %s: capability %s: %s: %w", lease, l.Capability, why, errdefs.ErrPermissionDenied))
	}
	if wait := b.grants.take(sandboxID, b.now()); wait > 0 {
		return Grant{}, b.deny(ctx, id, sandboxID, d, b.limitedError(d.action, l.Capability, wait))
	}
	now := b.now()
	g := Grant{LeaseID: lease, Capability: l.Capability, Secret: l.SecretName, ExpiresAt: now.Add(c.ttl())}
	d.allow, d.reason = true, "renewed for "+c.ttl().String()
	err = b.commits.write(func(tx *store.Tx) error {
		if err := tx.ExtendLease(ctx, lease, g.ExpiresAt); err != nil {
			return err
		}
		return tx.AppendAudit(ctx, b.audit(id, sandboxID, d, now))
	})
	if err != nil {
		return Grant{}, fmt.Errorf("lease %s: renew: %w", lease, err)
	}
	b.decisions.WithLabelValues(d.action, "allow").Inc()
	return g, nil
}

// Revoke ends a lease of sandboxID (the sandbox is done with the value).
func (b *Broker) Revoke(ctx context.Context, sandboxID, lease string) error {
	d := decision{action: "revoke", leaseID: lease}
	id, l, err := b.lease(ctx, sandboxID, lease)
	d.capability = l.Capability
	if err != nil {
		return b.deny(ctx, id, sandboxID, d, err)
	}
	now := b.now()
	d.allow, d.reason = true, "revoked by the sandbox"
	err = b.commits.write(func(tx *store.Tx) error {
		if err := tx.RevokeLease(ctx, lease, d.reason, now); err != nil {
			return err
		}
		return tx.AppendAudit(ctx, b.audit(id, sandboxID, d, now))
	})
	if err != nil {
		return fmt.Errorf("lease %s: revoke: %w", lease, err)
	}
	b.decisions.WithLabelValues(d.action, "allow").Inc()
	return nil
}

// RevokeSandbox revokes every lease of a sandbox that stopped; the control plane calls it
// as the sandbox goes.
func (b *Broker) RevokeSandbox(ctx context.Context, sandboxID, reason string) {
	var n int
	b.grants.forget(sandboxID)
	suppressed := b.denials.forget(sandboxID)
	err := b.commits.write(func(tx *store.Tx) error {
		if suppressed > 0 {
			// The sandbox is gone: its owner is no longer at hand, the sandbox is named.
			if err := tx.AppendAudit(ctx, suppressedEvent("", sandboxID, suppressed, b.now())); err != nil {
				return err
			}
		}
		var err error
		n, err = tx.RevokeSandboxLeases(ctx, sandboxID, reason, b.now())
		if err != nil || n == 0 {
			return err
		}
		return tx.AppendAudit(ctx, store.AuditEvent{At: b.now(), Action: "broker.revoke_sandbox", Target: sandboxID,
			Detail: map[string]any{"sandbox_id": sandboxID, "leases": n, "reason": reason}})
	})
	if err != nil {
		b.log.Warn("revoke the leases of a stopped sandbox", "sandbox", sandboxID, "err", err)
	}
}

// lease checks that lease stands and was issued to sandboxID. A lease of another sandbox is
// "not found", exactly as a forged one, so that lease IDs reveal nothing.
func (b *Broker) lease(ctx context.Context, sandboxID, lease string) (Identity, store.Lease, error) {
	id, err := b.identify(ctx, sandboxID)
	if err != nil {
		return id, store.Lease{}, err
	}
	if !leaseID.MatchString(lease) {
		return id, store.Lease{}, fmt.Errorf("lease ID %q: want ls- and 32 hex digits: %w", lease, errdefs.ErrInvalidArgument)
	}
	l, err := b.st.Lease(ctx, lease)
	switch {
	case errors.Is(err, errdefs.ErrNotFound), err == nil && l.SandboxID != sandboxID:
		return id, store.Lease{}, fmt.Errorf("lease %s: no such lease for this sandbox: %w", lease, errdefs.ErrNotFound)
	case err != nil:
		return id, l, err
	case !l.RevokedAt.IsZero():
		return id, l, fmt.Errorf("lease %s was revoked (%s); ask for capability %s again: %w", lease, l.RevokeReason, l.Capability, errdefs.ErrFailedPrecondition)
	case !b.now().Before(l.ExpiresAt):
		return id, l, fmt.Errorf("lease %s expired at %s; ask for capability %s again: %w", lease, l.ExpiresAt.Format(time.RFC3339), l.Capability, errdefs.ErrFailedPrecondition)
	}
	return id, l, nil
}

// identify looks up the sandbox a request came from; a stopped one may ask nothing.
func (b *Broker) identify(ctx context.Context, sandboxID string) (Identity, error) {
	id, err := b.sandboxes.Identify(ctx, sandboxID)
	if err != nil {
		return id, fmt.Errorf("sandbox %s: %w", sandboxID, err)
	}
	if !id.Running {
		return id, fmt.Errorf("sandbox %s has stopped: %w", sandboxID, errdefs.ErrFailedPrecondition)
	}
	return id, nil
}

// deny records a denied decision and returns err, the caller's error.
func (b *Broker) deny(ctx context.Context, id Identity, sandboxID string, d decision, err error) error {
	d.reason = err.Error()
	b.decisions.WithLabelValues(d.action, "deny").Inc()
	now := b.now()
	audit, suppressed := b.denials.take(sandboxID, now)
	if !audit {
		return err
	}
	aerr := b.commits.write(func(tx *store.Tx) error {
		if suppressed > 0 {
			if err := tx.AppendAudit(ctx, suppressedEvent(id.UserID, sandboxID, suppressed, now)); err != nil {
				return err
			}
		}
		return tx.AppendAudit(ctx, b.audit(id, sandboxID, d, now))
	})
	if aerr != nil {
		b.log.Warn("audit a broker decision", "sandbox", sandboxID, "err", aerr)
	}
	return err
}

// suppressedEvent counts the denials of a sandbox that were not audited one by one.
func suppressedEvent(userID, sandboxID string, n int, at time.Time) store.AuditEvent {
	return store.AuditEvent{At: at, ActorUserID: userID, Action: "broker.deny_suppressed", Target: sandboxID,
		Detail: map[string]any{"sandbox_id": sandboxID, "denials": n,
			"reason": fmt.Sprintf("more than %d denials a second: counted, not audited one by one", denyRate)}}
}

// audit is the audit event of d: who, which sandbox, which capability, when, the outcome
// and why. Never a value.
func (b *Broker) audit(id Identity, sandboxID string, d decision, at time.Time) store.AuditEvent {
	outcome := "deny"
	if d.allow {
		outcome = "allow"
	}
	detail := map[string]any{"sandbox_id": sandboxID, "capability": d.capability, "decision": outcome, "reason": d.reason}
	if d.leaseID != "" {
		detail["lease_id"] = d.leaseID
	}
	return store.AuditEvent{At: at, ActorUserID: id.UserID, Action: "broker." + d.action, Target: d.capability, Detail: detail}
}

// Handler serves the broker's API to sandboxes (mounted on the host's services):
//
//	POST   /v1/capabilities/{name}     resolve: the value and its lease
//	POST   /v1/leases/{id}/renew       extend a lease (no value)
//	DELETE /v1/leases/{id}             revoke a lease
//
// Errors are the control plane's JSON error shape.
func (b *Broker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/capabilities/{name}", func(w http.ResponseWriter, r *http.Request) {
		b.serve(w, r, func(sb string) (any, error) {
			g, err := b.Resolve(r.Context(), sb, r.PathValue("name"))
			return grantJSON(g, true), err
		})
	})
	mux.HandleFunc("POST /v1/leases/{id}/renew", func(w http.ResponseWriter, r *http.Request) {
		b.serve(w, r, func(sb string) (any, error) {
			g, err := b.Renew(r.Context(), sb, r.PathValue("id"))
			return grantJSON(g, false), err
		})
	})
	mux.HandleFunc("DELETE /v1/leases/{id}", func(w http.ResponseWriter, r *http.Request) {
		b.serve(w, r, func(sb string) (any, error) { return nil, b.Revoke(r.Context(), sb, r.PathValue("id")) })
	})
	return mux
}

func (b *Broker) serve(w http.ResponseWriter, r *http.Request, do func(sandboxID string) (any, error)) {
	sb, ok := SandboxFrom(r.Context())
	if !ok {
		// A wiring bug, not the caller's: the request did not come through a sandbox channel.
		b.log.Error("broker request without a sandbox identity", "path", r.URL.Path)
		api.WriteError(w, b.log, fmt.Errorf("the broker answers only requests from a sandbox: %w", errdefs.ErrPermissionDenied))
		return
	}
	v, err := do(sb)
	var le *LimitedError
	if errors.As(err, &le) {
		w.Header().Set("Retry-After", retryAfterSeconds(le.RetryAfter))
	}
	switch {
	case err != nil:
		api.WriteError(w, b.log, err)
	case v == nil:
		w.WriteHeader(http.StatusNoContent)
	default:
		api.WriteJSON(w, http.StatusOK, v)
	}
}

// grantJSON is g as the broker's API answers it (the shape brokerclient reads).
func grantJSON(g Grant, withValue bool) brokerclient.Grant {
	j := brokerclient.Grant{LeaseID: g.LeaseID, Capability: g.Capability, Secret: g.Secret, ExpiresAt: g.ExpiresAt.UTC()}
	if !g.ExpiresAt.IsZero() {
		j.TTLSeconds = int64(time.Until(g.ExpiresAt).Round(time.Second) / time.Second)
	}
	if withValue {
		j.Value = string(g.Value)
	}
	return j
}
