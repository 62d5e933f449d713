package secrets

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store"
)

// Get may answer from the rows it read lately, but never after this process wrote: a put,
// a delete and a rotation are seen at once; another process's write within rowCacheTTL.
func TestGetSeesWrites(t *testing.T) {
	e := newEnv(t)
	e.put(t, "alice", "token", "v1")
	if got, err := e.get("alice", "token"); err != nil || got != "v1" {
		t.Fatalf("Get = %q, %v", got, err)
	}
	e.put(t, "alice", "token", "v2")
	if got, _ := e.get("alice", "token"); got != "v2" {
		t.Fatalf("Get after a put = %q, want v2 at once", got)
	}
	if _, err := e.s.RotateKey(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.get("alice", "token"); got != "v2" {
		t.Fatalf("Get after a rotation = %q, want v2", got)
	}

	// Another process (here: another Secrets on the same database) writes.
	other := e.mustOpen(t)
	if _, err := other.Put(context.Background(), e.users["alice"], "token", []byte("v3")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(rowCacheTTL)
	if got, _ := e.get("alice", "token"); got != "v3" {
		t.Fatalf("Get %s after another process's put = %q, want v3", rowCacheTTL, got)
	}

	if err := e.s.Delete(context.Background(), e.users["alice"], "token"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.get("alice", "token"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Get after a delete = %v, want not found at once", err)
	}
}

// A row read before a write committed is not cached once the write has dropped it.
func TestRowCacheRefusesRowsReadBeforeAWrite(t *testing.T) {
	var c rowCache
	now := time.Now()
	_, gen, ok := c.get("u", "n", now)
	if ok {
		t.Fatal("an empty cache had a row")
	}
	c.drop("u", "n") // a write commits while the row is being read
	c.put(store.SecretRow{UserID: "u", Name: "n", Version: 1}, gen, now)
	if _, _, ok := c.get("u", "n", now); ok {
		t.Fatal("a row read before a write was cached after it")
	}
	_, gen, _ = c.get("u", "n", now)
	c.put(store.SecretRow{UserID: "u", Name: "n", Version: 2}, gen, now)
	if r, _, ok := c.get("u", "n", now); !ok || r.Version != 2 {
		t.Fatalf("get = %+v, %v", r, ok)
	}
	if _, _, ok := c.get("u", "n", now.Add(rowCacheTTL)); ok {
		t.Fatal("a row older than the TTL was served")
	}
}
