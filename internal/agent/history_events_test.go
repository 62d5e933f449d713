package agent

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

func TestHistoryEventsHub(t *testing.T) {
	t.Run("a slow subscriber loses events and is told how many", func(t *testing.T) {
		h := newEventHub()
		sub, _, _ := h.subscribe("", 0)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range eventBuffer + 5 {
				h.publish(&pb.HistoryEvent{Kind: EventCheckpoint})
			}
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("publish blocked on a subscriber that does not read")
		}
		if n := len(sub.ch); n != eventBuffer {
			t.Fatalf("buffered %d, want %d", n, eventBuffer)
		}
		if lost := h.takeLost(sub); lost != 5 {
			t.Fatalf("lost %d, want 5", lost)
		}
		if lost := h.takeLost(sub); lost != 0 {
			t.Fatalf("lost %d after taking it, want 0", lost)
		}
	})
	t.Run("without an epoch a subscriber gets what nobody has seen", func(t *testing.T) {
		h := newEventHub()
		for range 3 {
			h.publish(&pb.HistoryEvent{Kind: EventCheckpoint})
		}
		sub, replay, lost := h.subscribe("", 0)
		if len(replay) != 3 || lost != 0 || replay[0].Seq != 1 {
			t.Fatalf("first subscriber: replay %v lost %d, want the 3 events", replay, lost)
		}
		h.publish(&pb.HistoryEvent{Kind: EventCheckpoint}) // seen by sub
		h.unsubscribe(sub)
		if _, replay, _ := h.subscribe("another-epoch", 2); len(replay) != 0 {
			t.Fatalf("second subscriber: replay %v, want nothing (all seen)", replay)
		}
	})
	t.Run("a subscriber that comes back gets what it missed", func(t *testing.T) {
		h := newEventHub()
		for range eventBacklog + 10 {
			h.publish(&pb.HistoryEvent{Kind: EventCheckpoint})
		}
		_, replay, lost := h.subscribe(h.epoch, eventBacklog)
		if len(replay) != 10 || replay[0].Seq != eventBacklog+1 || lost != 0 {
			t.Fatalf("resume after %d: %d events from %d, lost %d; want 10 from %d", eventBacklog, len(replay), replay[0].Seq, lost, eventBacklog+1)
		}
		_, replay, lost = h.subscribe(h.epoch, 0)
		if len(replay) != eventBacklog || lost != 10 {
			t.Fatalf("resume after 0: %d events, lost %d; want %d and 10 lost", len(replay), lost, eventBacklog)
		}
	})
}

// nextEvent reads events until one of kind comes, failing after a while.
func nextEvent(t *testing.T, evs <-chan *pb.HistoryEvent, kind string) *pb.HistoryEvent {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-evs:
			if !ok {
				t.Fatalf("event stream ended waiting for %s", kind)
			}
			if ev.Kind == kind {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s event", kind)
		}
	}
}

func subscribeEvents(t *testing.T, a historyAgent) <-chan *pb.HistoryEvent {
	t.Helper()
	c, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := pb.NewHistoryClient(a.conn).Events(c, &pb.HistoryEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	evs := make(chan *pb.HistoryEvent, 64)
	go func() {
		defer close(evs)
		for {
			ev, err := stream.Recv()
			if err != nil {
				return
			}
			evs <- ev
		}
	}()
	return evs
}

func TestHistoryEvents(t *testing.T) {
	a := startHistoryAgent(t, wire.TierContainer, nil)
	hc := pb.NewHistoryClient(a.conn)
	evs := subscribeEvents(t, a)

	// The workspace as the agent found it was checkpointed before anyone listened: the
	// first subscriber gets it all the same.
	first := nextEvent(t, evs, EventCheckpoint)
	if first.Checkpoint.GetCause() != "watcher" || first.Seq != 1 || first.Epoch == "" {
		t.Fatalf("first event %+v, want the start checkpoint, seq 1", first)
	}
	a.writeFile(t, "a.txt", "secret-canary")
	w := nextEvent(t, evs, EventCheckpoint)
	if w.Checkpoint.GetCause() != "agent-write" || w.Checkpoint.GetChanged() != 1 || w.Current != w.Checkpoint.GetId() || w.Seq != first.Seq+1 {
		t.Fatalf("after a write: %+v, want an agent-write checkpoint of 1 change", w)
	}
	if _, err := pb.NewProcessClient(a.conn).Execute(ctx(t), &pb.ExecuteRequest{Argv: []string{"sh", "-c", "echo x > b.txt"}}); err != nil {
		t.Fatal(err)
	}
	if e := nextEvent(t, evs, EventCheckpoint); e.Checkpoint.GetCause() != "exec" {
		t.Fatalf("after an exec: %+v, want an exec checkpoint", e)
	}
	if _, err := hc.Undo(ctx(t), &pb.UndoRequest{}); err != nil {
		t.Fatal(err)
	}
	if u := nextEvent(t, evs, EventRestore); u.Op != EventUndo || u.Checkpoint.GetRestores() != w.Checkpoint.GetId() || u.Current != w.Checkpoint.GetId() {
		t.Fatalf("after undo: %+v, want an undo back to %s", u, w.Checkpoint.GetId())
	}
	if _, err := hc.Begin(ctx(t), &pb.BeginRequest{Message: "edit"}); err != nil {
		t.Fatal(err)
	}
	if b := nextEvent(t, evs, EventBegin); b.Transaction.GetMessage() != "edit" {
		t.Fatalf("begin: %+v", b)
	}
	a.writeFile(t, "c.txt", "c")
	if _, err := hc.Commit(ctx(t), &pb.CommitRequest{}); err != nil {
		t.Fatal(err)
	}
	if c := nextEvent(t, evs, EventCommit); !c.Created || c.Checkpoint.GetCause() != "transaction" {
		t.Fatalf("commit: %+v, want a transaction checkpoint", c)
	}
}

func TestHistoryEventsUnavailableOutsideContainerTier(t *testing.T) {
	a := startHistoryAgent(t, wire.TierMicroVM, nil)
	stream, err := pb.NewHistoryClient(a.conn).Events(ctx(t), &pb.HistoryEventsRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("events in the microvm tier: %v, want Unavailable", err)
	}
}
