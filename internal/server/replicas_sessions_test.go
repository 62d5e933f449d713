package server_test

import (
	"context"
	"net/http"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/auth"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/store/pgtest"
	"github.com/paddockhq/paddock/internal/testenv"
)

// A sign-out answered by one replica ends the session on every replica: the same cookie,
// which another replica had just served from its cache, is refused there at once after
// the answer. With that replica paused (SIGSTOP), the sign-out is answered only once its
// heartbeat has expired, and resumed it refuses the cookie too.
func TestReplicasSessionSignOut(t *testing.T) {
	testenv.RequireRoot(t)
	dbURL := pgtest.URL(t)
	rs := startReplicas(t, dbURL, 2)
	e := &servertest.Env{URL: rs[0].url}
	base, _ := url.Parse(rs[0].url)
	cookieOf := func(c *servertest.Client) string {
		for _, ck := range c.HTTP.Jar.Cookies(base) {
			if ck.Name == auth.InsecureCookieName {
				return ck.Value
			}
		}
		t.Fatalf("%s has no session cookie", c.User.Username)
		return ""
	}
	// me asks r who the session cookie signs in.
	me := func(r *replica, cookie string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", r.url+"/api/v1/me", nil)
		req.AddCookie(&http.Cookie{Name: auth.InsecureCookieName, Value: cookie})
		resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
		if err != nil {
			t.Fatalf("GET /api/v1/me through %s: %v", r.id, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	logout := func(c *servertest.Client) {
		t.Helper()
		servertest.Decode(t, c.Do("POST", "/auth/logout", nil), http.StatusNoContent, nil)
	}

	alice := e.Register(t, "alice")
	ck := cookieOf(alice)
	if code := me(rs[1], ck); code != http.StatusOK {
		t.Fatalf("alice's session through r2: %d, want 200", code)
	}
	logout(alice)
	if code := me(rs[1], ck); code != http.StatusUnauthorized {
		t.Errorf("alice's session through r2 right after she signed out through r1: %d, want 401", code)
	}
	if code := me(rs[0], ck); code != http.StatusUnauthorized {
		t.Errorf("alice's session through r1 after she signed out there: %d, want 401", code)
	}

	// r2 paused holds bob's session in its cache: the sign-out waits for r2 to apply it,
	// or for its heartbeat (3s) to expire, so that r2 never serves it after the answer.
	bob := e.Register(t, "bob")
	ck = cookieOf(bob)
	if code := me(rs[1], ck); code != http.StatusOK {
		t.Fatalf("bob's session through r2: %d, want 200", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rs[1].cmd.Process.Signal(syscall.SIGSTOP)
	logout(bob)
	r2, rerr := st.ReplicaByID(ctx, "r2")
	rs[1].cmd.Process.Signal(syscall.SIGCONT)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if age := time.Since(r2.HeartbeatAt); age < testHeartbeatTTL {
		t.Errorf("a sign-out was answered while r2, paused, was alive (heartbeat %s old) and had not applied it", age.Round(time.Millisecond))
	}
	if code := me(rs[1], ck); code != http.StatusUnauthorized {
		t.Errorf("bob's session through r2 once resumed: %d, want 401", code)
	}
}
