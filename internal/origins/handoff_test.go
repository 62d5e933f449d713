package origins

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/auth"
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
