package store

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// TestOldTokensMigrated opens a database from before the accounts migration holding a user's and an admin's
// token from before expiry and scopes: after the upgrade both carry the scopes they had in
// effect and expire about 30 days from the upgrade.
func TestOldTokensMigrated(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "paddock.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT`); err != nil {
		t.Fatal(err)
	}
	// Every migration before this one (its number may change when branches merge).
	before := slices.IndexFunc(ms, func(m migration) bool { return m.name == "accounts" })
	if before < 0 {
		t.Fatal("no accounts migration")
	}
	for _, m := range ms[:before] {
		if _, err := db.Exec(m.sql); err != nil {
			t.Fatalf("migration %d: %v", m.version, err)
		}
		if _, err := db.Exec(`INSERT INTO schema_migrations VALUES (?, ?, 0)`, m.version, m.name); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{
		`INSERT INTO users (id, username, password_hash, role, created_at) VALUES ('u1', 'alice', 'x', 'user', 0), ('u2', 'root', 'x', 'admin', 0)`,
		`INSERT INTO api_tokens (id, user_id, name, token_hash, prefix, created_at) VALUES ('t1', 'u1', 'old', randomblob(32), 'pdk_a', 0), ('t2', 'u2', 'old', randomblob(32), 'pdk_b', 0)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for user, want := range map[string]string{"u1": "read write tokens", "u2": "read write tokens admin"} {
		toks, err := s.ListAPITokens(ctx, user)
		if err != nil || len(toks) != 1 {
			t.Fatalf("%s: %v, %v", user, toks, err)
		}
		tok := toks[0]
		if tok.Scopes != want {
			t.Errorf("%s's old token: scopes %q, want %q", user, tok.Scopes, want)
		}
		if d := time.Until(tok.ExpiresAt); d < 29*24*time.Hour || d > 31*24*time.Hour {
			t.Errorf("%s's old token expires at %v, want about 30 days from now", user, tok.ExpiresAt)
		}
	}
}

func TestInvites(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		s := db.open(t)
		ctx := context.Background()
		admin := mustUser(t, s, "root")
		create := func(code string, uses int, exp time.Time) Invite {
			t.Helper()
			var in Invite
			err := s.Update(ctx, func(tx *Tx) error {
				var err error
				in, err = tx.CreateInvite(ctx, Invite{CodeHash: hash(code), Prefix: code[:4], CreatedBy: admin.ID, CreatedAt: t0, ExpiresAt: exp, MaxUses: uses})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			return in
		}
		redeem := func(code string, at time.Time) error {
			return s.Update(ctx, func(tx *Tx) error { _, err := tx.RedeemInvite(ctx, hash(code), at); return err })
		}
		create("inv_two", 2, t0.Add(time.Hour))
		old := create("inv_old", 5, t0.Add(time.Minute))
		gone := create("inv_gone", 5, t0.Add(time.Hour))
		if err := s.Update(ctx, func(tx *Tx) error { return tx.RevokeInvite(ctx, gone.ID, t0) }); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			code string
			at   time.Time
			ok   bool
		}{
			{"inv_two", t0, true},
			{"inv_two", t0, true},
			{"inv_two", t0, false}, // used up
			{"inv_old", t0.Add(time.Minute), false},
			{"inv_gone", t0, false},
			{"inv_none", t0, false},
		} {
			if err := redeem(tc.code, tc.at); (err == nil) != tc.ok || (err != nil && !errors.Is(err, errdefs.ErrNotFound)) {
				t.Errorf("redeem %s at %v: %v, want ok=%v", tc.code, tc.at, err, tc.ok)
			}
		}
		_ = old
		// Concurrent redemptions of a one-use invite: exactly one wins.
		create("inv_once", 1, t0.Add(time.Hour))
		var wg sync.WaitGroup
		wins := make(chan bool, 8)
		for range 8 {
			wg.Add(1)
			go func() { defer wg.Done(); wins <- redeem("inv_once", t0) == nil }()
		}
		wg.Wait()
		close(wins)
		n := 0
		for w := range wins {
			if w {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d concurrent redemptions of a one-use invite won, want 1", n)
		}
		list, err := s.ListInvites(ctx)
		if err != nil || len(list) != 4 {
			t.Fatalf("ListInvites = %d, %v", len(list), err)
		}
	})
}
