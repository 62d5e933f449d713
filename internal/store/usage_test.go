package store

import (
	"context"
	"testing"
	"time"
)

// A day's usage adds up, each day apart, and pruning drops the days before the one given.
func TestUsage(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		s := db.open(t)
		ctx := context.Background()
		u := mustUser(t, s, "alice").ID
		day := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
		before := day.AddDate(0, 0, -1)
		for _, add := range []struct {
			day    time.Time
			tokens int64
			total  int64
		}{{before, 5, 5}, {day, 7, 7}, {day, 3, 10}} {
			if total, err := s.AddUsage(ctx, u, "anthropic", add.day, add.tokens); err != nil || total != add.total {
				t.Fatalf("AddUsage(%s, %d) = %d, %v; want %d", add.day.Format(time.DateOnly), add.tokens, total, err, add.total)
			}
		}
		if err := s.PruneUsage(ctx, day); err != nil {
			t.Fatal(err)
		}
		if n, err := s.Usage(ctx, u, "anthropic", before); err != nil || n != 0 {
			t.Errorf("the day before, pruned: %d, %v", n, err)
		}
		if n, err := s.Usage(ctx, u, "anthropic", day); err != nil || n != 10 {
			t.Errorf("the day: %d, %v; want 10", n, err)
		}
	})
}
