package server_test

import (
	"context"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/store/pgtest"
	"github.com/paddockhq/paddock/internal/testenv"
)

// API tokens are cached on each replica and kept exact as sessions are: a token revoked
// through one replica is refused by another that had just served it from its cache, right
// after the answer. With that replica paused, the revocation is answered only once its
// heartbeat has expired, and resumed it refuses the token too.
func TestReplicasTokenRevoke(t *testing.T) {
	testenv.RequireRoot(t)
	dbURL := pgtest.URL(t)
	rs := startReplicas(t, dbURL, 2)
	alice := (&servertest.Env{URL: rs[0].url}).Register(t, "alice")
	me := func(r *replica, token string) int {
		t.Helper()
		code, body, err := tokenDo(context.Background(), r.url, token, "GET", "/api/v1/me", nil)
		if err != nil {
			t.Fatalf("GET /api/v1/me through %s: %v %s", r.id, err, body)
		}
		return code
	}
	mint := func(name string) api.Token {
		t.Helper()
		var tok api.Token
		alice.MustJSON("POST", "/api/v1/tokens", api.CreateTokenRequest{Name: name}, http.StatusCreated, &tok)
		if code := me(rs[1], tok.Secret); code != http.StatusOK {
			t.Fatalf("token %s through r2: %d, want 200", name, code)
		}
		return tok
	}
	revoke := func(tok api.Token) {
		t.Helper()
		servertest.Decode(t, alice.Do("DELETE", "/api/v1/tokens/"+tok.ID, nil), http.StatusNoContent, nil)
	}

	one := mint("one")
	revoke(one)
	if code := me(rs[1], one.Secret); code != http.StatusUnauthorized {
		t.Errorf("a token through r2 right after it was revoked through r1: %d, want 401", code)
	}
	if code := me(rs[0], one.Secret); code != http.StatusUnauthorized {
		t.Errorf("a token through r1 after it was revoked there: %d, want 401", code)
	}

	two := mint("two")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rs[1].cmd.Process.Signal(syscall.SIGSTOP)
	revoke(two)
	r2, rerr := st.ReplicaByID(ctx, "r2")
	rs[1].cmd.Process.Signal(syscall.SIGCONT)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if age := time.Since(r2.HeartbeatAt); age < testHeartbeatTTL {
		t.Errorf("a revocation was answered while r2, paused, was alive (heartbeat %s old) and had not applied it", age.Round(time.Millisecond))
	}
	if code := me(rs[1], two.Secret); code != http.StatusUnauthorized {
		t.Errorf("the revoked token through r2 once resumed: %d, want 401", code)
	}
	if code := me(rs[1], alice.Token); code != http.StatusOK {
		t.Errorf("alice's other token through r2: %d, want 200", code)
	}
}
