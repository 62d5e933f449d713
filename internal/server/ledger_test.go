package server

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/store/pgtest"
)

// TestUsageLedgerSurvivesRestart: the gateway's daily token counts are kept in the store,
// so a new control plane on the same database (a restart) sees what was spent today, and
// a new UTC day starts from zero. On SQLite and on PostgreSQL.
func TestUsageLedgerSurvivesRestart(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testUsageLedgerSurvivesRestart(t, filepath.Join(t.TempDir(), "paddock.db")) })
	t.Run("postgres", func(t *testing.T) { testUsageLedgerSurvivesRestart(t, pgtest.URL(t)) })
}

func testUsageLedgerSurvivesRestart(t *testing.T, path string) {
	ctx := context.Background()
	st, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	var alice store.User
	err = st.Update(ctx, func(tx *store.Tx) error {
		alice, err = tx.CreateUser(ctx, store.User{ID: store.NewID(), Username: "alice", PasswordHash: "x", Role: "user", CreatedAt: time.Now()}, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 24, 22, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	l := newUsageLedger(st, clock)
	if n, err := l.Spent(ctx, alice.ID, "openai"); err != nil || n != 0 {
		t.Fatalf("Spent of a new user: %d %v", n, err)
	}
	var wg sync.WaitGroup
	for range 20 { // concurrent answers: none is lost between the cache and the store
		wg.Go(func() {
			if err := l.Add(ctx, alice.ID, "openai", 50); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() { _, _ = l.Spent(ctx, alice.ID, "openai") })
	}
	wg.Wait()
	if err := l.Add(ctx, alice.ID, "anthropic", 7); err != nil {
		t.Fatal(err)
	}
	if n, _ := l.Spent(ctx, alice.ID, "openai"); n != 1000 {
		t.Fatalf("Spent after 20 answers of 50 tokens: %d, want 1000", n)
	}

	// A restart: a new ledger on the same database.
	st.Close()
	st, err = store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l = newUsageLedger(st, clock)
	if n, err := l.Spent(ctx, alice.ID, "openai"); err != nil || n != 1000 {
		t.Fatalf("Spent after a restart: %d %v, want 1000", n, err)
	}
	if n, _ := l.Spent(ctx, alice.ID, "anthropic"); n != 7 {
		t.Fatalf("anthropic after a restart: %d, want 7", n)
	}

	// The next UTC day starts afresh; the old day's count stays in the store until pruned.
	now = now.Add(3 * time.Hour)
	if n, _ := l.Spent(ctx, alice.ID, "openai"); n != 0 {
		t.Fatalf("Spent on the next day: %d, want 0", n)
	}
	if n, _ := st.Usage(ctx, alice.ID, "openai", utcMidnight(now).AddDate(0, 0, -1)); n != 1000 {
		t.Fatalf("yesterday's count in the store: %d, want 1000", n)
	}
	now = now.AddDate(0, 0, usageKept+1)
	if _, err := l.Spent(ctx, alice.ID, "openai"); err != nil {
		t.Fatal(err)
	}
	if n, _ := st.Usage(ctx, alice.ID, "openai", time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)); n != 0 {
		t.Fatalf("a count older than %d days: %d, want it pruned", usageKept, n)
	}
}
