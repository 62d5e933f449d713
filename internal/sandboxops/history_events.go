package sandboxops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/agentclient"
	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// Timeline events. A running sandbox's agent tells what happens to its workspace history
// (checkpoints by any cause, restores, transactions, imports, compactions, a recovery, a
// checkpoint the size budget refused);
// the control plane records each in its event store as an event of the sandbox's owner,
// with the sandbox as target, so that the timeline is visible and coordinated here even
// while the sandbox is stopped. It is coordination, not storage: the files and the
// agent's history stay the truth, and an event that is lost (the control plane down for
// longer than the agent keeps events) loses nothing of the workspace.
//
// What is recorded is the agent's word about its own sandbox, so it is bounded: known
// kinds only, IDs and messages cut to size, never file contents (the agent sends none).

// Event actions, "history." + the agent's kind; historyLost is recorded when the agent
// says events were lost before the one that follows.
const (
	historyActionPrefix = "history."
	historyLost         = "history.lost"
)

// historyKinds are the agent's event kinds the control plane records.
var historyKinds = map[string]bool{
	"checkpoint": true, "restore": true, "begin": true, "commit": true, "rollback": true,
	"import": true, "compaction": true, "recovery": true, "budget": true,
}

// Bounds of what an event's detail carries.
const (
	maxEventMessage = 200
	maxEventNote    = 500
)

// Resubscription backoff, when the agent's stream breaks while the sandbox runs.
var (
	historyRetryMin = 500 * time.Millisecond
	historyRetryMax = 30 * time.Second
)

// FollowHistory records sandbox rec's history events until the returned stop is called
// (the fleet calls it when it stops holding the sandbox); stop returns once nothing is
// left running. Tiers without history are not followed at all.
func (o *Ops) FollowHistory(rec store.Sandbox, sb *runner.Sandbox) (stop func()) {
	log := o.log.With("sandbox", rec.ID)
	if t := wire.Tier(rec.Tier); t == wire.TierProcess || t == wire.TierMicroVM {
		log.Debug("history events not followed: the tier has no workspace history", "tier", rec.Tier)
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	o.followers.Add(1)
	go func() {
		defer close(done)
		defer o.followers.Add(-1)
		o.followLoop(ctx, rec, sb.Agent(), log)
	}()
	return func() {
		cancel()
		<-done
	}
}

// followLoop subscribes, and subscribes again with backoff when the stream breaks,
// resuming after the last event recorded. A failure is logged once at debug until a
// subscription delivers again: a history that is unavailable (no store) stays quiet.
func (o *Ops) followLoop(ctx context.Context, rec store.Sandbox, hc *agentclient.Client, log *slog.Logger) {
	var cur pb.HistoryEventsRequest
	wait, quiet := historyRetryMin, false
	for {
		got, err := o.followOnce(ctx, rec, hc, &cur)
		if ctx.Err() != nil {
			return
		}
		if got {
			wait, quiet = historyRetryMin, false
		}
		if !quiet {
			log.Debug("history events: subscription ended; subscribing again", "err", err, "in", wait)
			quiet = true
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(wait*2, historyRetryMax)
	}
}

// followOnce records one subscription's events; got says it delivered any.
func (o *Ops) followOnce(ctx context.Context, rec store.Sandbox, hc *agentclient.Client, cur *pb.HistoryEventsRequest) (got bool, err error) {
	stream, err := hc.Events(ctx, &pb.HistoryEventsRequest{Epoch: cur.Epoch, After: cur.After})
	if err != nil {
		return false, fmt.Errorf("history events: %w", err)
	}
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return got, nil // the agent is stopping
		}
		if err != nil {
			return got, fmt.Errorf("history events: %w", err)
		}
		got = true
		cur.Epoch, cur.After = ev.GetEpoch(), ev.GetSeq()
		o.recordHistoryEvent(rec, ev)
	}
}

// recordHistoryEvent writes ev to the event store as an event of the sandbox's owner now.
// It is committed after, as the records of sandbox operations are (Ops.Event): a
// checkpoint follows every write, and its record must not put an fsync of the store
// beside it. A stop does not lose it: closing the store commits what is queued.
func (o *Ops) recordHistoryEvent(rec store.Sandbox, ev *pb.HistoryEvent) {
	if !historyKinds[ev.GetKind()] {
		o.log.Debug("history event of an unknown kind dropped", "sandbox", rec.ID, "kind", bounded(ev.GetKind(), 32))
		return
	}
	owner := rec.UserID
	if r, ok := o.fleet.RunningRecord(rec.ID); ok {
		owner = r.UserID
	}
	at := time.Unix(0, ev.GetTimeUnixNano())
	if ev.GetTimeUnixNano() <= 0 {
		at = time.Now()
	}
	failed := func(err error) {
		o.log.Warn("record history event", "sandbox", rec.ID, "kind", ev.GetKind(), "err", err)
	}
	record := func(action string, detail map[string]any) {
		e := store.AuditEvent{At: at, ActorUserID: owner, Action: action, Target: rec.ID, Detail: detail}
		if err := o.st.AuditLater(e, failed); err != nil {
			failed(err)
		}
	}
	if n := ev.GetLost(); n > 0 {
		record(historyLost, map[string]any{"sandbox_id": rec.ID, "lost": n})
	}
	record(historyActionPrefix+ev.GetKind(), historyDetail(rec.ID, ev))
}

// historyDetail is what an event says: identifiers, causes and counts, and messages cut
// to maxEventMessage (they are text a user or a command line chose).
func historyDetail(sandboxID string, ev *pb.HistoryEvent) map[string]any {
	d := map[string]any{"sandbox_id": sandboxID, "epoch": bounded(ev.GetEpoch(), 32), "seq": ev.GetSeq()}
	put := func(k, v string, n int) {
		if v != "" {
			d[k] = bounded(v, n)
		}
	}
	put("op", ev.GetOp(), 16)
	put("current", ev.GetCurrent(), maxCheckpointID)
	if c := ev.GetCheckpoint(); c != nil {
		put("checkpoint", c.GetId(), maxCheckpointID)
		put("parent", c.GetParent(), maxCheckpointID)
		put("cause", c.GetCause(), 32)
		put("message", c.GetMessage(), maxEventMessage)
		put("restores", c.GetRestores(), maxCheckpointID)
		put("checkpoint_transaction", c.GetTransaction(), maxCheckpointID)
		d["changed"] = c.GetChanged()
	}
	if tx := ev.GetTransaction(); tx != nil {
		put("transaction", tx.GetId(), maxCheckpointID)
		put("transaction_message", tx.GetMessage(), maxEventMessage)
		put("base", tx.GetBase(), maxCheckpointID)
	}
	switch ev.GetKind() {
	case "commit":
		d["created"] = ev.GetCreated()
	case "compaction":
		d["compacted"], d["compacted_total"] = ev.GetCompacted(), ev.GetCompactedTotal()
	case "recovery", "budget":
		put("note", ev.GetNote(), maxEventNote)
	}
	return d
}

// bounded cuts s to at most n bytes, on a rune boundary, marking the cut.
func bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// Followers is how many running sandboxes' history events are followed now.
func (o *Ops) Followers() int64 { return o.followers.Load() }

// HistoryEvents lists sandbox id's timeline events from the event store, oldest first,
// after the event ID after, at most limit (0: 100) of them: it answers whether the
// sandbox runs or not.
func (o *Ops) HistoryEvents(ctx context.Context, c fleet.Caller, id string, after int64, limit int) (api.EventList, error) {
	if _, err := o.fleet.Get(ctx, c, id); err != nil {
		return api.EventList{}, err
	}
	switch {
	case after < 0:
		return api.EventList{}, fmt.Errorf("after: %d: want an event ID (a number, 0 or more): %w", after, errdefs.ErrInvalidArgument)
	case limit < 0 || limit > 1000:
		return api.EventList{}, fmt.Errorf("limit: %d: want a number from 1 to 1000: %w", limit, errdefs.ErrInvalidArgument)
	case limit == 0:
		limit = 100
	}
	evs, err := o.st.ListTarget(ctx, store.TargetFilter{Target: id, ActionPrefix: historyActionPrefix, Limit: limit, After: after})
	if err != nil {
		return api.EventList{}, err
	}
	out := api.EventList{Events: []api.Event{}}
	for _, e := range evs {
		out.Events = append(out.Events, api.Event{ID: e.ID, At: e.At.UTC().Truncate(time.Microsecond), Actor: e.ActorUserID, Action: e.Action, Target: e.Target, Detail: e.Detail})
	}
	return out, nil
}
