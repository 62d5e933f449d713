package broker

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store"
)

// A sandbox granted a capability in a loop is held to grantRate a second after a burst:
// the rest get 429 with Retry-After, each refusal a denial, and no lease row; other
// sandboxes are not held back.
func TestGrantsAreRateLimited(t *testing.T) {
	eachStore(t, func(t *testing.T, target string) {
		ctx := context.Background()
		st, err := store.Open(ctx, target)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		for _, u := range []string{"u1", "u2"} {
			if err := st.Update(ctx, func(tx *store.Tx) error {
				_, err := tx.CreateUser(ctx, store.User{ID: u, Username: "user" + u, Role: "user", PasswordHash: "x", CreatedAt: time.Now()}, nil)
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		p, err := ParsePolicy([]byte("capabilities:\n  gh: {secrets: [github_token]}\n"), "policy.yaml")
		if err != nil {
			t.Fatal(err)
		}
		sb := fleetTable{"sb-hostile00": {UserID: "u1", Username: "useru1", Running: true}, "sb-quiet0000": {UserID: "u2", Username: "useru2", Running: true}}
		b, err := New(st, sb, fixedSecrets("v"), p, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		now := time.Unix(1_800_000_000, 0)
		b.now = func() time.Time { return now }
		granted, limited := 0, 0
		for range 200 {
			_, err := b.Resolve(ctx, "sb-hostile00", "gh")
			var le *LimitedError
			switch {
			case err == nil:
				granted++
			case errors.As(err, &le) && errors.Is(err, errdefs.ErrLimitExceeded) && le.RetryAfter > 0:
				limited++
			default:
				t.Fatalf("Resolve: %v", err)
			}
		}
		if granted != grantBurst || limited != 200-grantBurst {
			t.Errorf("%d granted and %d limited at one instant, want %d and %d", granted, limited, grantBurst, 200-grantBurst)
		}
		if _, err := b.Resolve(ctx, "sb-quiet0000", "gh"); err != nil {
			t.Errorf("another sandbox: %v", err)
		}
		now = now.Add(time.Second)
		for i := range grantRate {
			if _, err := b.Resolve(ctx, "sb-hostile00", "gh"); err != nil {
				t.Fatalf("grant %d a second later: %v", i+1, err)
			}
		}
		// Over HTTP: 429 with Retry-After.
		req := httptest.NewRequestWithContext(WithSandbox(ctx, "sb-hostile00"), "POST", "/v1/capabilities/gh", nil)
		rec := httptest.NewRecorder()
		b.Handler().ServeHTTP(rec, req)
		if s, err := strconv.Atoi(rec.Header().Get("Retry-After")); rec.Code != http.StatusTooManyRequests || err != nil || s < 1 || !strings.Contains(rec.Body.String(), "grants a second") {
			t.Errorf("HTTP: %d Retry-After %q %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
		}
		var leases int
		evs, _ := st.ListAudit(ctx, store.AuditFilter{Action: "broker.resolve", Limit: 1000})
		for _, e := range evs {
			if e.Detail["decision"] == "allow" {
				leases++
			} else if !strings.Contains(e.Detail["reason"].(string), "grants a second") {
				t.Errorf("denial without the rate named: %v", e.Detail)
			}
		}
		if leases != grantBurst+1+grantRate {
			t.Errorf("%d grants audited, want %d", leases, grantBurst+1+grantRate)
		}
	})
}
