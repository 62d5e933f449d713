package store

import (
	"context"
	"testing"
	"time"
)

// A dead replica's sandbox goes to one taker: the first compare-and-set wins, a second
// (which read the same dead owner) loses, and a replica that beat again keeps its own.
func TestTakeOverSandbox(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		s := db.open(t)
		alice := mustUser(t, s, "alice")
		mustSandbox(t, s, alice.ID, "sb-aaaaaaaaaa", "one")
		mustSandbox(t, s, alice.ID, "sb-bbbbbbbbbb", "two")
		now := time.Now()
		for _, r := range []Replica{{ID: "r1", Advertise: "10.0.0.1:7000"}, {ID: "r2", Advertise: "10.0.0.2:7000"}, {ID: "r3", Advertise: "10.0.0.3:7000"}} {
			if err := s.Heartbeat(ctx, r, now); err != nil {
				t.Fatal(err)
			}
		}
		for _, id := range []string{"sb-aaaaaaaaaa", "sb-bbbbbbbbbb"} {
			if err := s.Update(ctx, func(tx *Tx) error { return tx.ClaimSandbox(ctx, id, "r1", now.Add(-time.Minute)) }); err != nil {
				t.Fatal(err)
			}
		}
		take := func(id, from, self string, aliveSince time.Time) bool {
			t.Helper()
			var won bool
			if err := s.Update(ctx, func(tx *Tx) (err error) {
				won, err = tx.TakeOverSandbox(ctx, id, from, self, aliveSince)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			return won
		}
		alive := now.Add(-time.Minute) // r1's heartbeat is newer: alive
		if take("sb-aaaaaaaaaa", "r1", "r2", alive) {
			t.Fatal("took over a live replica's sandbox")
		}
		if o, err := s.Orphans(ctx, "r2", alive); err != nil || len(o) != 0 {
			t.Fatalf("orphans while r1 lives: %+v, %v", o, err)
		}
		dead := now.Add(time.Minute) // every heartbeat is older: dead
		if o, err := s.Orphans(ctx, "r2", dead); err != nil || len(o) != 2 || o[0].Replica.ID != "r1" || o[0].SandboxID != "sb-aaaaaaaaaa" {
			t.Fatalf("orphans once r1 is dead: %+v, %v", o, err)
		}
		if !take("sb-aaaaaaaaaa", "r1", "r2", dead) {
			t.Fatal("r2 did not take over dead r1's sandbox")
		}
		if take("sb-aaaaaaaaaa", "r1", "r3", dead) {
			t.Fatal("r3 took over the sandbox r2 had taken: two adopters")
		}
		if sb, err := s.SandboxByID(ctx, "sb-aaaaaaaaaa"); err != nil || sb.Replica != "r2" {
			t.Fatalf("sandbox's replica %q (%v), want r2", sb.Replica, err)
		}
		// r1 comes back before the second is taken: it keeps it.
		if err := s.Heartbeat(ctx, Replica{ID: "r1", Advertise: "10.0.0.1:7000"}, now.Add(2*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if take("sb-bbbbbbbbbb", "r1", "r3", dead) {
			t.Fatal("took over the sandbox of a replica that beat again")
		}
		if mine, err := s.SandboxesOf(ctx, "r1"); err != nil || len(mine) != 1 || !mine["sb-bbbbbbbbbb"] {
			t.Fatalf("r1's sandboxes: %v, %v", mine, err)
		}
	})
}
