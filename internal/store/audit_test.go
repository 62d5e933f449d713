package store

import (
	"context"
	"errors"
	"testing"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// A target's events are listed oldest first after a cursor, by action prefix, and only
// that target's.
func TestListTarget(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		s := db.open(t)
		ctx := context.Background()
		for _, e := range []AuditEvent{
			{At: t0, ActorUserID: "u1", Action: "history.checkpoint", Target: "sb-a"},
			{At: t0, ActorUserID: "u1", Action: "sandbox.history_undo", Target: "sb-a"},
			{At: t0, ActorUserID: "u1", Action: "history.restore", Target: "sb-a"},
			{At: t0, ActorUserID: "u2", Action: "history.checkpoint", Target: "sb-b"},
			{At: t0, ActorUserID: "u1", Action: "history.checkpoint", Target: "sb-a"},
		} {
			if err := s.Update(ctx, func(tx *Tx) error { return tx.AppendAudit(ctx, e) }); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.ListTarget(ctx, TargetFilter{Target: "sb-a", ActionPrefix: "history."})
		if err != nil || len(got) != 3 || got[0].Action != "history.checkpoint" || got[1].Action != "history.restore" || got[0].ID >= got[2].ID {
			t.Fatalf("ListTarget(sb-a, history.) = %+v, %v; want 3, oldest first", got, err)
		}
		after, _ := s.ListTarget(ctx, TargetFilter{Target: "sb-a", ActionPrefix: "history.", After: got[1].ID})
		if len(after) != 1 || after[0].ID != got[2].ID {
			t.Errorf("after %d: %+v, want the last one", got[1].ID, after)
		}
		if all, _ := s.ListTarget(ctx, TargetFilter{Target: "sb-a", Limit: 2}); len(all) != 2 {
			t.Errorf("limit 2, every action: %d events", len(all))
		}
		if _, err := s.ListTarget(ctx, TargetFilter{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("no target: %v, want ErrInvalidArgument", err)
		}
	})
}

// Audit records its events together, or none of them.
func TestAuditAllOrNone(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		s := db.open(t)
		ctx := context.Background()
		if err := s.Audit(ctx, AuditEvent{At: t0, Action: "history.lost", Target: "sb-a"}, AuditEvent{At: t0, Action: "history.checkpoint", Target: "sb-a"}); err != nil {
			t.Fatal(err)
		}
		err := s.Audit(ctx, AuditEvent{At: t0, Action: "history.restore", Target: "sb-a"}, AuditEvent{At: t0, Target: "sb-a"})
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("an event without an action: %v, want ErrInvalidArgument", err)
		}
		got, err := s.ListTarget(ctx, TargetFilter{Target: "sb-a"})
		if err != nil || len(got) != 2 || got[0].Action != "history.lost" || got[1].Action != "history.checkpoint" {
			t.Errorf("events: %+v, %v; want the first two only", got, err)
		}
	})
}
