package origins

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/auth"
	"github.com/paddockhq/paddock/internal/store"
)

// Persisted cookies survive a new Handoffs on the same file, and the file holds neither
// a cookie's value nor its session's ID; a revoked cookie stays revoked.
func TestHandoffsPersist(t *testing.T) {
	path := filepath.Join(t.TempDir(), "handoffs.json")
	hs := NewHandoffs(nil)
	if err := hs.Persist(path); err != nil {
		t.Fatal(err)
	}
	sess := auth.SessionID("session-secret-abcdefghijklmnopqrstuvwxyz")
	g := Grant{Host: "Desktop-sb-x.localhost:8080", UserID: "u1", Session: sess, Expires: time.Now().Add(time.Hour)}
	kept, gone := hs.Open(g), hs.Open(g)
	hs.Revoke(gone)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{kept, gone, sess.Reveal()} {
		if strings.Contains(string(b), secret) {
			t.Errorf("the file holds a secret %q:\n%s", secret, b)
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("the file's mode: %v %v, want readable by its owner only", fi.Mode(), err)
	}

	again := NewHandoffs(nil)
	if err := again.Persist(path); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := again.Cookie([]string{kept}, "desktop-sb-y.localhost:8080"); ok {
		t.Error("a kept cookie is valid on another host")
	}
	got, v, ok := again.Cookie([]string{"forged", gone, kept}, "desktop-sb-x.localhost:8080")
	if !ok || v != kept || got.Session != sess || got.UserID != "u1" {
		t.Fatalf("after a restart the cookie gives %+v %v (value ok %v), want the grant with its session", got, ok, v == kept)
	}
	if _, _, ok := again.Cookie([]string{gone}, "desktop-sb-x.localhost:8080"); ok {
		t.Error("a revoked cookie is valid after a restart")
	}
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := NewHandoffs(nil).Persist(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("a corrupt file: %v, want an error naming it", err)
	}
}

// Replicas sharing the database: a cookie opened on one signs in on the other, which then
// answers it from what it read for sharedCookieTTL (another replica's eviction of it shows
// after that); a cookie revoked on a replica is gone there at once.
func TestSharedCookiesSeen(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "paddock.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	clock := func() time.Time { return now }
	a, b := NewHandoffs(clock), NewHandoffs(clock)
	a.Share(st)
	b.Share(st)
	const host = "live--u1.apps.example.com"
	g := Grant{Host: host, UserID: "u1", Session: "session-one", Expires: now.Add(time.Hour)}
	v := a.Open(g)
	if got, _, ok := b.Cookie([]string{v}, host); !ok || got.UserID != "u1" || got.Session != "session-one" {
		t.Fatalf("a cookie opened on a, on b: %+v %v", got, ok)
	}
	if err := st.DeleteAppCookie(ctx, cookieKey(v)); err != nil { // as a's eviction of it
		t.Fatal(err)
	}
	if _, _, ok := b.Cookie([]string{v}, host); !ok {
		t.Fatal("b, having read the cookie, no longer answers it from what it read")
	}
	if _, _, ok := b.Cookie([]string{v}, "dev--u1.apps.example.com"); ok {
		t.Fatal("b answers the cookie for another host")
	}
	now = now.Add(sharedCookieTTL)
	if _, _, ok := b.Cookie([]string{v}, host); ok {
		t.Fatal("b answers a cookie gone from the database for longer than sharedCookieTTL")
	}
	w := b.Open(g)
	if _, _, ok := b.Cookie([]string{w}, host); !ok {
		t.Fatal("a second cookie on b")
	}
	b.Revoke(w)
	if _, _, ok := b.Cookie([]string{w}, host); ok {
		t.Fatal("b answers a cookie it revoked")
	}
}
