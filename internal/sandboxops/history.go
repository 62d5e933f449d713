package sandboxops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/sandbox/agentclient"
	"github.com/paddockhq/paddock/internal/store"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// A sandbox's workspace history is kept by its agent (package agent/history): these
// operations relay to the agent's History service over the sandbox's channel, so they
// work whatever state the sandbox's app is in, crashed or crash-looping included. A
// sandbox that is not running has no agent to ask: its history waits in its store until
// it starts again.

// Bounds of history requests.
const (
	maxHistoryMessage = 4096
	maxCheckpointID   = 64
	// MaxImport bounds an uploaded history export.
	MaxImport = 8 << 30
)

// history reaches the agent of the caller's own sandbox; another user's sandbox is not
// found.
func (o *Ops) history(ctx context.Context, c fleet.Caller, id string) (*agentclient.Client, error) {
	return o.fleet.Agent(ctx, c, id)
}

// historyError keeps the agent's message, which names the checkpoint or says why history
// is unavailable, and its kind: a missing checkpoint is a 404, nothing to undo a 409.
func historyError(op, id string, err error) error {
	return fmt.Errorf("%s in sandbox %s: %w", op, id, err)
}

// History lists sandbox id's checkpoints and its open transaction.
func (o *Ops) History(ctx context.Context, c fleet.Caller, id string) (api.History, error) {
	hc, err := o.history(ctx, c, id)
	if err != nil {
		return api.History{}, err
	}
	res, err := hc.HistoryList(ctx)
	if err != nil {
		return api.History{}, historyError("history", id, err)
	}
	out := api.History{Checkpoints: []api.Checkpoint{}, Current: res.Current, StoreBytes: res.StoreBytes, BudgetBytes: res.BudgetBytes}
	for _, cp := range res.Checkpoints {
		out.Checkpoints = append(out.Checkpoints, checkpointOf(cp))
	}
	if res.Transaction != nil {
		tx := transactionOf(res.Transaction)
		out.Transaction = &tx
	}
	return out, nil
}

func checkMessage(m string) error {
	if len(m) > maxHistoryMessage {
		return fmt.Errorf("message: %d bytes, over %d: %w", len(m), maxHistoryMessage, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Checkpoint records the workspace as it is now; Created is false when nothing changed
// since the current checkpoint, which is then the result.
func (o *Ops) Checkpoint(ctx context.Context, c fleet.Caller, id string, req api.CheckpointRequest) (api.CheckpointResult, error) {
	hc, err := o.history(ctx, c, id)
	if err != nil {
		return api.CheckpointResult{}, err
	}
	if err := checkMessage(req.Message); err != nil {
		return api.CheckpointResult{}, err
	}
	res, err := hc.Checkpoint(ctx, req.Message)
	if err != nil {
		return api.CheckpointResult{}, historyError("checkpoint", id, err)
	}
	out := api.CheckpointResult{Checkpoint: checkpointOf(res.Checkpoint), Created: res.Created}
	if res.Created {
		o.event(ctx, c.UserID, "sandbox.history_checkpoint", map[string]any{"sandbox": id, "checkpoint": out.Checkpoint.ID})
	}
	return out, nil
}

// Undo restores the checkpoint before the current one.
func (o *Ops) Undo(ctx context.Context, c fleet.Caller, id string) (api.RestoreResult, error) {
	return o.restoreWith(ctx, c, id, "undo", func(hc *agentclient.Client) (*pb.RestoreResponse, error) { return hc.Undo(ctx) })
}

// Redo restores the checkpoint the last undo left.
func (o *Ops) Redo(ctx context.Context, c fleet.Caller, id string) (api.RestoreResult, error) {
	return o.restoreWith(ctx, c, id, "redo", func(hc *agentclient.Client) (*pb.RestoreResponse, error) { return hc.Redo(ctx) })
}

// Restore restores a checkpoint by its ID.
func (o *Ops) Restore(ctx context.Context, c fleet.Caller, id string, req api.RestoreRequest) (api.RestoreResult, error) {
	if _, err := o.history(ctx, c, id); err != nil {
		return api.RestoreResult{}, err
	}
	if err := checkCheckpointID("checkpoint", req.Checkpoint); err != nil {
		return api.RestoreResult{}, err
	}
	return o.restoreWith(ctx, c, id, "restore", func(hc *agentclient.Client) (*pb.RestoreResponse, error) { return hc.Restore(ctx, req.Checkpoint) })
}

// restoreWith runs one of undo, redo and restore, and audits it once it has changed the
// workspace.
func (o *Ops) restoreWith(ctx context.Context, c fleet.Caller, id, op string, call func(*agentclient.Client) (*pb.RestoreResponse, error)) (api.RestoreResult, error) {
	hc, err := o.history(ctx, c, id)
	if err != nil {
		return api.RestoreResult{}, err
	}
	res, err := call(hc)
	if err != nil {
		return api.RestoreResult{}, historyError(op, id, err)
	}
	out := api.RestoreResult{Checkpoint: checkpointOf(res.Checkpoint), Current: res.Current, AppRestarted: res.AppRestarted, AppNote: res.AppNote}
	o.event(ctx, c.UserID, "sandbox.history_"+op, map[string]any{
		"sandbox": id, "checkpoint": out.Checkpoint.ID, "restores": out.Checkpoint.Restores, "app_restarted": out.AppRestarted,
	})
	return out, nil
}

// Begin opens a transaction; one already open is a conflict that names it.
func (o *Ops) Begin(ctx context.Context, c fleet.Caller, id string, req api.BeginRequest) (api.Transaction, error) {
	hc, err := o.history(ctx, c, id)
	if err != nil {
		return api.Transaction{}, err
	}
	if err := checkMessage(req.Message); err != nil {
		return api.Transaction{}, err
	}
	res, err := hc.Begin(ctx, req.Message)
	if err != nil {
		return api.Transaction{}, historyError("begin transaction", id, err)
	}
	tx := transactionOf(res.Transaction)
	o.event(ctx, c.UserID, "sandbox.history_begin", map[string]any{"sandbox": id, "transaction": tx.ID, "base": tx.Base})
	return tx, nil
}

// Commit ends the open transaction with a checkpoint.
func (o *Ops) Commit(ctx context.Context, c fleet.Caller, id string) (api.CommitResult, error) {
	hc, err := o.history(ctx, c, id)
	if err != nil {
		return api.CommitResult{}, err
	}
	res, err := hc.Commit(ctx)
	if err != nil {
		return api.CommitResult{}, historyError("commit", id, err)
	}
	out := api.CommitResult{Checkpoint: checkpointOf(res.Checkpoint), Created: res.Created, Transaction: transactionOf(res.Transaction)}
	o.event(ctx, c.UserID, "sandbox.history_commit", map[string]any{"sandbox": id, "transaction": out.Transaction.ID, "checkpoint": out.Checkpoint.ID, "created": out.Created})
	return out, nil
}

// Rollback ends the open transaction, restoring the workspace to its base.
func (o *Ops) Rollback(ctx context.Context, c fleet.Caller, id string) (api.RollbackResult, error) {
	hc, err := o.history(ctx, c, id)
	if err != nil {
		return api.RollbackResult{}, err
	}
	res, err := hc.Rollback(ctx)
	if err != nil {
		return api.RollbackResult{}, historyError("rollback", id, err)
	}
	out := api.RollbackResult{Transaction: transactionOf(res.Transaction), Current: res.Current, AppRestarted: res.AppRestarted, AppNote: res.AppNote}
	o.event(ctx, c.UserID, "sandbox.history_rollback", map[string]any{"sandbox": id, "transaction": out.Transaction.ID, "checkpoint": out.Current, "app_restarted": out.AppRestarted})
	return out, nil
}

// ExportHistory starts streaming sandbox id's history as one file. A refusal (a
// transaction open) comes before any content; a stream cut short after it leaves the
// file without its end record, which its importer detects.
func (o *Ops) ExportHistory(ctx context.Context, c fleet.Caller, id string) (*Download, error) {
	hc, err := o.history(ctx, c, id)
	if err != nil {
		return nil, err
	}
	stream, err := hc.Export(ctx)
	if err != nil {
		return nil, historyError("export", id, err)
	}
	first, err := stream.Recv()
	if err != nil {
		return nil, historyError("export", id, err)
	}
	next := func() ([]byte, error) {
		m, err := stream.Recv()
		return m.GetData(), err
	}
	return &Download{first: first.GetData(), next: next, done: func(err error) {
		if err != nil {
			o.log.Warn("history export cut short", "sandbox", id, "err", err)
		}
		o.event(ctx, c.UserID, "sandbox.history_export", map[string]any{"sandbox": id})
	}}, nil
}

// ImportHistory replaces sandbox id's history with export, a file ExportHistory made.
func (o *Ops) ImportHistory(ctx context.Context, c fleet.Caller, id string, export io.Reader) (api.RestoreResult, error) {
	hc, err := o.history(ctx, c, id)
	if err != nil {
		return api.RestoreResult{}, err
	}
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := hc.Import(ictx)
	if err != nil {
		return api.RestoreResult{}, historyError("import", id, err)
	}
	buf := make([]byte, 256<<10)
	var total int64
	for {
		n, rerr := export.Read(buf)
		if total += int64(n); total > MaxImport {
			cancel()
			return api.RestoreResult{}, fmt.Errorf("import: the export is over %d bytes: %w", MaxImport, errdefs.ErrLimitExceeded)
		}
		if n > 0 {
			if err := stream.Send(&pb.ImportChunk{Data: buf[:n]}); err != nil {
				break // the agent refused; CloseAndRecv has its reason
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			cancel()
			return api.RestoreResult{}, fmt.Errorf("import: reading the upload: %v: %w", rerr, errdefs.ErrInvalidArgument)
		}
	}
	res, err := stream.CloseAndRecv()
	if err != nil {
		return api.RestoreResult{}, historyError("import", id, err)
	}
	out := api.RestoreResult{Checkpoint: checkpointOf(res.Checkpoint), Current: res.Current, AppRestarted: res.AppRestarted, AppNote: res.AppNote}
	o.event(ctx, c.UserID, "sandbox.history_import", map[string]any{"sandbox": id, "checkpoint": out.Current})
	return out, nil
}

func transactionOf(tx *pb.TransactionInfo) api.Transaction {
	return api.Transaction{ID: tx.GetId(), Message: tx.GetMessage(), Base: tx.GetBase(), Time: time.Unix(0, tx.GetTimeUnixNano()).UTC()}
}

// Diff lists the paths that differ between checkpoints from ("": the workspace's current
// one) and to.
func (o *Ops) Diff(ctx context.Context, c fleet.Caller, id, from, to string, lines bool) (api.HistoryDiff, error) {
	hc, err := o.history(ctx, c, id)
	if err != nil {
		return api.HistoryDiff{}, err
	}
	if err := checkCheckpointID("to", to); err != nil {
		return api.HistoryDiff{}, err
	}
	if from != "" {
		if err := checkCheckpointID("from", from); err != nil {
			return api.HistoryDiff{}, err
		}
	}
	diff := hc.Diff
	if lines {
		diff = func(ctx context.Context, from, to string) (*pb.DiffResponse, error) {
			return hc.DiffLines(ctx, from, to, 0)
		}
	}
	res, err := diff(ctx, from, to)
	if err != nil {
		return api.HistoryDiff{}, historyError("diff", id, err)
	}
	out := api.HistoryDiff{From: from, To: to,
		Added: nonNilStrings(res.Added), Changed: nonNilStrings(res.Changed), Removed: nonNilStrings(res.Removed)}
	if lines {
		out.Files = []api.FileDiff{}
		for _, f := range res.GetFiles() {
			out.Files = append(out.Files, api.FileDiff{Path: f.GetPath(), Status: f.GetStatus(), Binary: f.GetBinary(),
				Unified: f.GetUnified(), Truncated: f.GetTruncated(), Note: f.GetNote()})
		}
	}
	return out, nil
}

// checkCheckpointID refuses what cannot be a checkpoint ID before it travels; an ID of the
// right shape that does not exist is the agent's NotFound.
func checkCheckpointID(field, id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%s is required: give a checkpoint ID from paddock history: %w", field, errdefs.ErrInvalidArgument)
	case len(id) > maxCheckpointID || !utf8.ValidString(id):
		return fmt.Errorf("%s: not a checkpoint ID: %w", field, errdefs.ErrInvalidArgument)
	}
	return nil
}

func checkpointOf(cp *pb.CheckpointInfo) api.Checkpoint {
	return api.Checkpoint{
		ID: cp.GetId(), Parent: cp.GetParent(), Time: time.Unix(0, cp.GetTimeUnixNano()).UTC(), Cause: cp.GetCause(),
		Message: cp.GetMessage(), Changed: int(cp.GetChanged()), Restores: cp.GetRestores(),
		Transaction: cp.GetTransaction(), Compacted: int(cp.GetCompacted()),
	}
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Fork makes a new sandbox of c's from checkpoint req.At of sandbox id (see
// fleet.Fork). Without req.At, a running source's changes not yet recorded are
// checkpointed first, unless a transaction is open: then the fork starts from the state
// before it, and the result's note says so.
func (o *Ops) Fork(ctx context.Context, c fleet.Caller, id string, req api.ForkRequest) (store.Sandbox, api.ForkResult, error) {
	if req.At != "" {
		if err := checkCheckpointID("at", req.At); err != nil {
			return store.Sandbox{}, api.ForkResult{}, err
		}
	}
	if _, err := o.fleet.Get(ctx, c, id); err != nil {
		return store.Sandbox{}, api.ForkResult{}, err
	}
	if req.At == "" {
		if hc, err := o.fleet.Agent(ctx, c, id); err == nil {
			if res, err := hc.HistoryList(ctx); err == nil && res.Transaction == nil {
				if _, err := hc.Checkpoint(ctx, "before fork"); err != nil {
					return store.Sandbox{}, api.ForkResult{}, historyError("checkpoint before fork", id, err)
				}
			}
		}
	}
	f, err := o.fleet.Fork(ctx, c, id, req.At, req.Name)
	if err != nil {
		return f.Sandbox, api.ForkResult{}, err
	}
	out := api.ForkResult{From: id, At: f.History.At, SharedBlobs: f.History.Linked, ClonedBlobs: f.History.Cloned, Workspace: api.ForkFiles}
	if f.CopiedDisk {
		out.Workspace = api.ForkDiskCopy
	}
	if f.History.OpenTx != "" {
		out.Note = fmt.Sprintf("sandbox %s has transaction %s (%q) open: the fork starts from checkpoint %s, the state before it, without the transaction's changes", id, f.History.OpenTx, f.History.OpenTxMessage, f.History.At)
	}
	o.event(ctx, c.UserID, "sandbox.fork", map[string]any{"sandbox": f.Sandbox.ID, "from": id, "checkpoint": out.At, "workspace": out.Workspace, "proven": f.History.Proven})
	return f.Sandbox, out, nil
}
