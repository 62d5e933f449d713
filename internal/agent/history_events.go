package agent

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/paddockhq/paddock/internal/agent/history"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// Timeline events: what happens to the history is told to whoever subscribes (the control
// plane, which keeps it in its event store). History itself must never wait for a
// subscriber: publishing happens under the history lock, so it only ever appends to a ring
// and offers the event to each subscriber's bounded buffer. A subscriber whose buffer is
// full loses the event and is told how many it lost with the next one it gets.

// Bounds of the event fan-out. eventBacklog is what the agent keeps for a subscriber that
// comes back (or comes first, after events happened with nobody listening): a restart
// of the control plane or a broken channel loses nothing short of it.
const (
	eventBuffer  = 256
	eventBacklog = 1024
)

// Kinds of HistoryEvent.
const (
	EventCheckpoint = "checkpoint"
	EventRestore    = "restore"
	EventBegin      = "begin"
	EventCommit     = "commit"
	EventRollback   = "rollback"
	EventImport     = "import"
	EventCompaction = "compaction"
	EventRecovery   = "recovery"
	// EventBudget: a checkpoint the agent took by itself was not recorded, since the
	// changes do not fit in the history's size budget (Note says which and the budget).
	EventBudget = "budget"
)

// Ops of a restore event (EventRestore, the third, is also a kind).
const (
	EventUndo = "undo"
	EventRedo = "redo"
)

// eventHub fans the history's events out to subscribers.
type eventHub struct {
	epoch string

	mu   sync.Mutex
	seq  uint64
	ring []heldEvent // the last eventBacklog events, oldest first
	subs map[*subscriber]struct{}
}

// heldEvent is an event in the ring; seen says a subscriber has had it, so that a new
// subscriber without an epoch gets only what nobody has seen.
type heldEvent struct {
	ev   *pb.HistoryEvent
	seen bool
}

type subscriber struct {
	ch   chan *pb.HistoryEvent
	lost uint64 // guarded by eventHub.mu
}

func newEventHub() *eventHub {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return &eventHub{epoch: hex.EncodeToString(b), subs: map[*subscriber]struct{}{}}
}

// publish numbers ev and offers it to every subscriber, without ever blocking.
func (e *eventHub) publish(ev *pb.HistoryEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seq++
	ev.Epoch, ev.Seq = e.epoch, e.seq
	if ev.TimeUnixNano == 0 {
		ev.TimeUnixNano = time.Now().UnixNano()
	}
	if len(e.ring) == eventBacklog {
		e.ring = append(e.ring[:0], e.ring[1:]...)
	}
	e.ring = append(e.ring, heldEvent{ev: ev, seen: len(e.subs) > 0})
	for s := range e.subs {
		select {
		case s.ch <- ev:
		default:
			s.lost++
		}
	}
}

// subscribe registers a subscriber and returns, with it, what it gets first: the events
// after (epoch, after) when epoch is this agent's, else those nobody has seen. lost counts
// events it should have had that the ring no longer holds. Registering and taking the
// replay under one lock means no event is both replayed and delivered, or neither.
func (e *eventHub) subscribe(epoch string, after uint64) (s *subscriber, replay []*pb.HistoryEvent, lost uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s = &subscriber{ch: make(chan *pb.HistoryEvent, eventBuffer)}
	e.subs[s] = struct{}{}
	resume := epoch == e.epoch
	if resume && len(e.ring) > 0 && e.ring[0].ev.Seq > after+1 {
		lost = e.ring[0].ev.Seq - after - 1
	}
	for i := range e.ring {
		h := &e.ring[i]
		if (resume && h.ev.Seq > after) || (!resume && !h.seen) {
			replay = append(replay, h.ev)
			h.seen = true
		}
	}
	return s, replay, lost
}

// takeLost returns and resets how many events s lost.
func (e *eventHub) takeLost(s *subscriber) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := s.lost
	s.lost = 0
	return n
}

func (e *eventHub) unsubscribe(s *subscriber) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.subs, s)
}

// Events streams the timeline (see the proto). It ends when the caller goes or the agent
// stops, so that a subscriber never holds a graceful stop up.
func (s *historyService) Events(req *pb.HistoryEventsRequest, stream grpc.ServerStreamingServer[pb.HistoryEvent]) error {
	s.mu.Lock()
	_, err := s.open()
	s.mu.Unlock()
	if err != nil {
		return err
	}
	sub, replay, lost := s.events.subscribe(req.GetEpoch(), req.GetAfter())
	defer s.events.unsubscribe(sub)
	send := func(ev *pb.HistoryEvent, lost uint64) error {
		if lost > 0 { // events are shared by subscribers: the count goes on a copy
			ev = proto.CloneOf(ev)
			ev.Lost = lost
		}
		return stream.Send(ev)
	}
	for _, ev := range replay {
		if err := send(ev, lost); err != nil {
			return err
		}
		lost = 0
	}
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case <-s.stopping:
			return nil
		case ev := <-sub.ch:
			if err := send(ev, lost+s.events.takeLost(sub)); err != nil {
				return err
			}
			lost = 0
		}
	}
}

// The events historyService publishes, each after its operation has succeeded.

func (s *historyService) publishCheckpoint(c history.Checkpoint) {
	s.events.publish(&pb.HistoryEvent{Kind: EventCheckpoint, Checkpoint: checkpointInfo(c), Current: c.ID})
	s.noteCompaction()
}

func (s *historyService) publishRestore(op string, c history.Checkpoint, current string) {
	s.events.publish(&pb.HistoryEvent{Kind: EventRestore, Op: op, Checkpoint: checkpointInfo(c), Current: current})
	s.noteCompaction()
}

func (s *historyService) publishTx(kind string, tx history.Transaction, c *history.Checkpoint, created bool, current string) {
	ev := &pb.HistoryEvent{Kind: kind, Transaction: txInfo(tx), Created: created, Current: current}
	if c != nil {
		ev.Checkpoint = checkpointInfo(*c)
	}
	s.events.publish(ev)
	s.noteCompaction()
}

func (s *historyService) publishImport(c history.Checkpoint) {
	s.compacted = oldestCompacted(s.h) // an import brings its own past
	s.events.publish(&pb.HistoryEvent{Kind: EventImport, Checkpoint: checkpointInfo(c), Current: c.ID})
}

// noteCompaction publishes a compaction when the size budget dropped checkpoints since it
// last looked. The history says so only on its oldest checkpoint, so it is read after
// every change that could have compacted.
func (s *historyService) noteCompaction() {
	if s.h == nil {
		return
	}
	total := oldestCompacted(s.h)
	if total <= s.compacted {
		return
	}
	s.events.publish(&pb.HistoryEvent{Kind: EventCompaction, Compacted: uint32(total - s.compacted), CompactedTotal: uint32(total)})
	s.compacted = total
}

func oldestCompacted(h *history.History) int {
	l := h.List()
	if len(l) == 0 {
		return 0
	}
	return l[len(l)-1].Compacted
}
