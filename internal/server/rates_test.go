package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/gateway"
	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/store/pgtest"
)

// Two replicas' gateways on one PostgreSQL database: a user's requests, split across
// them, hit the request rate at the configured total, not twice it; the bucket refills
// at the configured rate, counted once. Each gateway keeps its buckets as a replica's
// does (gatewayRates); kept in memory, as one control plane keeps them, each would admit
// the whole rate.
func TestGatewayRateShared(t *testing.T) {
	ctx := context.Background()
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`))
	}))
	defer provider.Close()
	dbURL := pgtest.URL(t)
	// The clock is read by the gateway's usage records too, which end after the answer.
	var now atomic.Int64
	now.Store(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()).UTC() }
	cfg := gateway.Config{Providers: []gateway.Provider{{Name: "openai", Kind: gateway.KindOpenAI, BaseURL: provider.URL,
		APIKey: "sk-test-key", RequestsPerMinute: 4}}}
	replicaGateway := func(t *testing.T, replica string) *gateway.Gateway {
		st, err := store.Open(ctx, dbURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		s := &Server{st: st, cfg: Config{Replica: ReplicaConfig{ID: replica}}}
		g, err := gateway.New(cfg, gateway.Options{Now: clock, Rates: s.gatewayRates()})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	// send sends n completions of user's, alternating between gws, and counts the ones let through.
	send := func(t *testing.T, gws []*gateway.Gateway, user string, n int) int {
		ok := 0
		for i := range n {
			req := httptest.NewRequestWithContext(gateway.WithCaller(ctx, gateway.Caller{UserID: user, SandboxID: "sb-aaaaaaaaaa"}),
				"POST", "/openai/chat/completions", strings.NewReader(`{"model":"m","messages":[]}`))
			req.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			gws[i%len(gws)].ServeHTTP(w, req)
			switch w.Code {
			case http.StatusOK:
				ok++
			case http.StatusTooManyRequests:
			default:
				t.Fatalf("request %d through gateway %d: %d %s", i, i%len(gws), w.Code, w.Body)
			}
		}
		return ok
	}
	two := []*gateway.Gateway{replicaGateway(t, "r1"), replicaGateway(t, "r2")}
	if got := send(t, two, "alice", 10); got != 4 {
		t.Fatalf("alice's 10 requests across two replicas: %d let through, want 4 (the rate per minute)", got)
	}
	if got := send(t, two, "bob", 3); got != 3 {
		t.Fatalf("bob's 3 requests: %d let through, want 3 (a bucket of his own)", got)
	}
	now.Add(int64(30 * time.Second))
	if got := send(t, two, "alice", 6); got != 2 {
		t.Fatalf("alice's 6 requests half a minute later: %d let through, want 2 (half a minute's refill)", got)
	}

	// The control: one control plane's buckets are its own, in memory.
	alone := []*gateway.Gateway{replicaGateway(t, ""), replicaGateway(t, "")}
	if got := send(t, alone, "carol", 10); got != 8 {
		t.Fatalf("carol's 10 requests across two gateways keeping their own buckets: %d let through, want 8", got)
	}
}
