package broker

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store"
)

// fleetTable answers Identify as the control plane's fleet does, from a table.
type fleetTable map[string]Identity

func (f fleetTable) Identify(_ context.Context, id string) (Identity, error) { return f[id], nil }

// unsetSecrets is a user who has set no secret.
type unsetSecrets struct{}

func (unsetSecrets) Reveal(context.Context, string, string) ([]byte, error) {
	return nil, errdefs.ErrNotFound
}

// A sandbox that asks for what it may not have, in a loop, gets every answer but cannot
// fill the audit log: past the rate its denials are counted and written as one event.
func TestDenialsAreAuditedAtABoundedRate(t *testing.T) {
	eachStore(t, func(t *testing.T, target string) {
		ctx := context.Background()
		st, err := store.Open(ctx, target)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		sb := fleetTable{"sb-hostile00": {UserID: "u1", Username: "mallory", Running: true}}
		b, err := New(st, sb, unsetSecrets{}, nil, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		now := time.Unix(1_800_000_000, 0)
		b.now = func() time.Time { return now }
		for range 500 {
			if _, err := b.Resolve(ctx, "sb-hostile00", "aws"); !errors.Is(err, errdefs.ErrPermissionDenied) {
				t.Fatalf("Resolve = %v, want a denial", err)
			}
		}
		now = now.Add(time.Second)
		if _, err := b.Resolve(ctx, "sb-hostile00", "aws"); !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Fatalf("Resolve = %v, want a denial", err)
		}
		evs, err := st.ListAudit(ctx, store.AuditFilter{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var audited, suppressed int
		for _, e := range evs {
			switch e.Action {
			case "broker.resolve":
				audited++
				if !strings.Contains(e.Detail["reason"].(string), "no such capability") {
					t.Errorf("denial without its reason: %v", e.Detail)
				}
			case "broker.deny_suppressed":
				suppressed += int(e.Detail["denials"].(float64))
			}
		}
		if audited != denyBurst+1 || suppressed != 500-denyBurst {
			t.Fatalf("%d denials audited and %d counted, want %d and %d", audited, suppressed, denyBurst+1, 500-denyBurst)
		}
		// Another sandbox is not held back by this one.
		sb["sb-other0000"] = Identity{UserID: "u2", Username: "alice", Running: true}
		if audit, _ := b.denials.take("sb-other0000", now); !audit {
			t.Fatal("a quiet sandbox's denial was not audited")
		}
	})
}

// fixedSecrets has every secret set to one value.
type fixedSecrets string

func (f fixedSecrets) Reveal(context.Context, string, string) ([]byte, error) { return []byte(f), nil }

// A lease stands from its grant: a renew right after it works, the sandbox's stop revokes
// it, and lease IDs are in the order they were granted (so that the leases table's key
// appends), each still of the documented shape.
func TestLeasesStandFromTheGrant(t *testing.T) {
	eachStore(t, func(t *testing.T, target string) {
		ctx := context.Background()
		st, err := store.Open(ctx, target)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := st.Update(ctx, func(tx *store.Tx) error {
			_, err := tx.CreateUser(ctx, store.User{ID: "u1", Username: "alice", Role: "user", PasswordHash: "x", CreatedAt: time.Now()}, nil)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		p, err := ParsePolicy([]byte("capabilities:\n  gh: {secrets: [github_token]}\n"), "policy.yaml")
		if err != nil {
			t.Fatal(err)
		}
		sb := fleetTable{"sb-aaaaaaaaaa": {UserID: "u1", Username: "alice", Running: true}}
		b, err := New(st, sb, fixedSecrets("v"), p, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		prev := ""
		for range 20 {
			g, err := b.Resolve(ctx, "sb-aaaaaaaaaa", "gh")
			if err != nil {
				t.Fatal(err)
			}
			if !leaseID.MatchString(g.LeaseID) || g.LeaseID[:15] < prev {
				t.Fatalf("lease ID %s after %s: want ls- and 32 hex digits, time first", g.LeaseID, prev)
			}
			prev = g.LeaseID[:15]
			if _, err := b.Renew(ctx, "sb-aaaaaaaaaa", g.LeaseID); err != nil {
				t.Fatalf("renew right after the grant: %v", err)
			}
		}
		g, err := b.Resolve(ctx, "sb-aaaaaaaaaa", "gh")
		if err != nil {
			t.Fatal(err)
		}
		b.RevokeSandbox(ctx, "sb-aaaaaaaaaa", "the sandbox stopped")
		if _, err := b.Renew(ctx, "sb-aaaaaaaaaa", g.LeaseID); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "revoked") {
			t.Fatalf("renew of a lease revoked with its sandbox: %v", err)
		}
		last, err := b.Resolve(ctx, "sb-aaaaaaaaaa", "gh")
		if err != nil {
			t.Fatal(err)
		}
		b.Close()
		if l, err := st.Lease(ctx, last.LeaseID); err != nil || l.SandboxID != "sb-aaaaaaaaaa" || l.SecretName != "github_token" {
			t.Fatalf("a lease granted just before Close: %+v, %v", l, err)
		}
	})
}
