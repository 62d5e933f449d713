package store

import (
	"context"
	"errors"
	"fmt"
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

// AuditLater's events are listed by the next listing, in the order they were queued;
// the events of a store closed before its writer got to them are committed by Close; a
// bad event is an error at once, and one after Close is refused.
func TestAuditLater(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		target := db.target(t)
		s, err := Open(ctx, target)
		if err != nil {
			t.Fatal(err)
		}
		detail := map[string]any{"path": "a.txt"}
		const n = 200
		for i := range n {
			if err := s.AuditLater(AuditEvent{At: t0, Action: fmt.Sprintf("sandbox.file_write.%d", i), Target: "sb-a", Detail: detail}, nil); err != nil {
				t.Fatal(err)
			}
		}
		detail["path"] = "changed after queueing"
		got, err := s.ListTarget(ctx, TargetFilter{Target: "sb-a", Limit: n})
		if err != nil || len(got) != n {
			t.Fatalf("listing after %d queued events: %d, %v", n, len(got), err)
		}
		for i, e := range got {
			if e.Action != fmt.Sprintf("sandbox.file_write.%d", i) || e.Detail["path"] != "a.txt" {
				t.Fatalf("event %d: %s %v, want sandbox.file_write.%d with the detail as queued", i, e.Action, e.Detail, i)
			}
		}
		if err := s.AuditLater(AuditEvent{At: t0, Target: "sb-a"}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("an event without an action: %v, want ErrInvalidArgument", err)
		}
		for i := range n {
			if err := s.AuditLater(AuditEvent{At: t0, Action: "sandbox.file_mkdir", Target: fmt.Sprintf("sb-%d", i)}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.AuditLater(AuditEvent{At: t0, Action: "sandbox.file_write"}, nil); !errors.Is(err, errdefs.ErrUnavailable) {
			t.Errorf("after Close: %v, want ErrUnavailable", err)
		}
		s, err = Open(ctx, target)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		got, err = s.ListAudit(ctx, AuditFilter{Action: "sandbox.file_mkdir", Limit: 2 * n})
		if err != nil || len(got) != n || got[0].Target != fmt.Sprintf("sb-%d", n-1) {
			t.Fatalf("events queued before Close, after reopening: %d, %v; want %d, newest sb-%d", len(got), err, n, n-1)
		}
	})
}
