package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// A sandbox's workspace history is kept by its agent (package agent/history): these routes
// relay to the agent's History service over the sandbox's channel, so they work whatever
// state the sandbox's app is in, crashed or crash-looping included. A sandbox that is not
// running has no agent to ask: its history waits in its store until it starts again.

// Bounds of history requests.
const (
	maxHistoryBody    = 16 << 10
	maxHistoryMessage = 4096
	maxCheckpointID   = 64
)

func (s *Server) history(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	hc, err := s.historyClient(r, c)
	if err != nil {
		return err
	}
	res, err := hc.List(r.Context(), &pb.HistoryListRequest{})
	if err != nil {
		return historyError("history", r, err)
	}
	out := api.History{Checkpoints: []api.Checkpoint{}, Current: res.Current, StoreBytes: res.StoreBytes, BudgetBytes: res.BudgetBytes}
	for _, cp := range res.Checkpoints {
		out.Checkpoints = append(out.Checkpoints, checkpointOf(cp))
	}
	if res.Transaction != nil {
		tx := transactionOf(res.Transaction)
		out.Transaction = &tx
	}
	api.WriteJSON(w, http.StatusOK, out)
	return nil
}

// createCheckpoint answers 201 with a new checkpoint, or 200 with the current one when
// nothing changed since it.
func (s *Server) createCheckpoint(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	hc, err := s.historyClient(r, c)
	if err != nil {
		return err
	}
	var req api.CheckpointRequest
	if r.ContentLength != 0 { // a bare POST is a checkpoint without a message
		if err := api.DecodeJSON(w, r, &req, maxHistoryBody); err != nil {
			return err
		}
	}
	if len(req.Message) > maxHistoryMessage {
		return fmt.Errorf("message: %d bytes, over %d: %w", len(req.Message), maxHistoryMessage, errdefs.ErrInvalidArgument)
	}
	res, err := hc.Checkpoint(r.Context(), &pb.CheckpointRequest{Message: req.Message})
	if err != nil {
		return historyError("checkpoint", r, err)
	}
	out := api.CheckpointResult{Checkpoint: checkpointOf(res.Checkpoint), Created: res.Created}
	status := http.StatusOK
	if res.Created {
		status = http.StatusCreated
		s.event(r.Context(), c.UserID, "sandbox.history_checkpoint", map[string]any{"sandbox": r.PathValue("id"), "checkpoint": out.Checkpoint.ID})
	}
	api.WriteJSON(w, status, out)
	return nil
}

func (s *Server) undo(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	hc, err := s.historyClient(r, c)
	if err != nil {
		return err
	}
	return s.restoreWith(w, r, c, "undo", func() (*pb.RestoreResponse, error) {
		return hc.Undo(r.Context(), &pb.UndoRequest{})
	})
}

func (s *Server) redo(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	hc, err := s.historyClient(r, c)
	if err != nil {
		return err
	}
	return s.restoreWith(w, r, c, "redo", func() (*pb.RestoreResponse, error) {
		return hc.Redo(r.Context(), &pb.RedoRequest{})
	})
}

func (s *Server) restoreCheckpoint(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	hc, err := s.historyClient(r, c)
	if err != nil {
		return err
	}
	var req api.RestoreRequest
	if err := api.DecodeJSON(w, r, &req, maxHistoryBody); err != nil {
		return err
	}
	if err := checkCheckpointID("checkpoint", req.Checkpoint); err != nil {
		return err
	}
	return s.restoreWith(w, r, c, "restore", func() (*pb.RestoreResponse, error) {
		return hc.Restore(r.Context(), &pb.RestoreRequest{Checkpoint: req.Checkpoint})
	})
}

// restoreWith runs one of undo, redo and restore, and audits it once it has changed the
// workspace.
func (s *Server) restoreWith(w http.ResponseWriter, r *http.Request, c fleet.Caller, op string, call func() (*pb.RestoreResponse, error)) error {
	res, err := call()
	if err != nil {
		return historyError(op, r, err)
	}
	out := api.RestoreResult{Checkpoint: checkpointOf(res.Checkpoint), Current: res.Current, AppRestarted: res.AppRestarted, AppNote: res.AppNote}
	s.event(r.Context(), c.UserID, "sandbox.history_"+op, map[string]any{
		"sandbox": r.PathValue("id"), "checkpoint": out.Checkpoint.ID, "restores": out.Checkpoint.Restores, "app_restarted": out.AppRestarted,
	})
	api.WriteJSON(w, http.StatusOK, out)
	return nil
}

// beginTransaction answers 201 with the transaction begun, or 409 naming the one open.
func (s *Server) beginTransaction(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	hc, err := s.historyClient(r, c)
	if err != nil {
		return err
	}
	var req api.BeginRequest
	if r.ContentLength != 0 { // a bare POST is a transaction without a message
		if err := api.DecodeJSON(w, r, &req, maxHistoryBody); err != nil {
			return err
		}
	}
	if len(req.Message) > maxHistoryMessage {
		return fmt.Errorf("message: %d bytes, over %d: %w", len(req.Message), maxHistoryMessage, errdefs.ErrInvalidArgument)
	}
	res, err := hc.Begin(r.Context(), &pb.BeginRequest{Message: req.Message})
	if err != nil {
		return historyError("begin transaction", r, err)
	}
	tx := transactionOf(res.Transaction)
	s.event(r.Context(), c.UserID, "sandbox.history_begin", map[string]any{"sandbox": r.PathValue("id"), "transaction": tx.ID, "base": tx.Base})
	api.WriteJSON(w, http.StatusCreated, tx)
	return nil
}

func (s *Server) commitTransaction(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	hc, err := s.historyClient(r, c)
	if err != nil {
		return err
	}
	res, err := hc.Commit(r.Context(), &pb.CommitRequest{})
	if err != nil {
		return historyError("commit", r, err)
	}
	out := api.CommitResult{Checkpoint: checkpointOf(res.Checkpoint), Created: res.Created, Transaction: transactionOf(res.Transaction)}
	s.event(r.Context(), c.UserID, "sandbox.history_commit", map[string]any{"sandbox": r.PathValue("id"), "transaction": out.Transaction.ID, "checkpoint": out.Checkpoint.ID, "created": out.Created})
	api.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) rollbackTransaction(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	hc, err := s.historyClient(r, c)
	if err != nil {
		return err
	}
	res, err := hc.Rollback(r.Context(), &pb.RollbackRequest{})
	if err != nil {
		return historyError("rollback", r, err)
	}
	out := api.RollbackResult{Transaction: transactionOf(res.Transaction), Current: res.Current, AppRestarted: res.AppRestarted, AppNote: res.AppNote}
	s.event(r.Context(), c.UserID, "sandbox.history_rollback", map[string]any{"sandbox": r.PathValue("id"), "transaction": out.Transaction.ID, "checkpoint": out.Current, "app_restarted": out.AppRestarted})
	api.WriteJSON(w, http.StatusOK, out)
	return nil
}

// maxImport bounds an uploaded history export.
const maxImport = 8 << 30

// exportHistory streams the sandbox's history as one file. The first chunk is awaited
// before the status is written, so that a refusal (a transaction open) is still a 409.
func (s *Server) exportHistory(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	hc, err := s.historyClient(r, c)
	if err != nil {
		return err
	}
	stream, err := hc.Export(r.Context(), &pb.ExportRequest{})
	if err != nil {
		return historyError("export", r, err)
	}
	first, err := stream.Recv()
	if err != nil {
		return historyError("export", r, err)
	}
	id := r.PathValue("id")
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="`+id+`.history"`)
	w.WriteHeader(http.StatusOK)
	for chunk := first; ; {
		if _, err := w.Write(chunk.GetData()); err != nil {
			return errResponded
		}
		if chunk, err = stream.Recv(); err != nil {
			if !errors.Is(err, io.EOF) {
				// Too late for an error response: the file stops short, which its
				// importer detects (its end record is missing).
				s.log.Warn("history export cut short", "sandbox", id, "err", err)
			}
			break
		}
	}
	s.event(r.Context(), c.UserID, "sandbox.history_export", map[string]any{"sandbox": id})
	return errResponded
}

// importHistory streams the request body, an export, to the agent.
func (s *Server) importHistory(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	hc, err := s.historyClient(r, c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stream, err := hc.Import(ctx)
	if err != nil {
		return historyError("import", r, err)
	}
	body := http.MaxBytesReader(w, r.Body, maxImport)
	buf := make([]byte, 256<<10)
	for {
		n, rerr := body.Read(buf)
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
			var tooBig *http.MaxBytesError
			if errors.As(rerr, &tooBig) {
				return fmt.Errorf("import: the export is over %d bytes: %w", maxImport, errdefs.ErrLimitExceeded)
			}
			return fmt.Errorf("import: reading the upload: %v: %w", rerr, errdefs.ErrInvalidArgument)
		}
	}
	res, err := stream.CloseAndRecv()
	if err != nil {
		return historyError("import", r, err)
	}
	out := api.RestoreResult{Checkpoint: checkpointOf(res.Checkpoint), Current: res.Current, AppRestarted: res.AppRestarted, AppNote: res.AppNote}
	s.event(r.Context(), c.UserID, "sandbox.history_import", map[string]any{"sandbox": r.PathValue("id"), "checkpoint": out.Current})
	api.WriteJSON(w, http.StatusOK, out)
	return nil
}

func transactionOf(tx *pb.TransactionInfo) api.Transaction {
	return api.Transaction{ID: tx.GetId(), Message: tx.GetMessage(), Base: tx.GetBase(), Time: time.Unix(0, tx.GetTimeUnixNano()).UTC()}
}

func (s *Server) historyDiff(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	hc, err := s.historyClient(r, c)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	from, to := q.Get("from"), q.Get("to")
	if err := checkCheckpointID("to", to); err != nil {
		return err
	}
	if from != "" {
		if err := checkCheckpointID("from", from); err != nil {
			return err
		}
	}
	res, err := hc.Diff(r.Context(), &pb.DiffRequest{From: from, To: to})
	if err != nil {
		return historyError("diff", r, err)
	}
	api.WriteJSON(w, http.StatusOK, api.HistoryDiff{From: from, To: to,
		Added: nonNilStrings(res.Added), Changed: nonNilStrings(res.Changed), Removed: nonNilStrings(res.Removed)})
	return nil
}

// historyClient reaches the History service of the caller's own sandbox; another user's
// sandbox is not found, as on every route.
func (s *Server) historyClient(r *http.Request, c fleet.Caller) (pb.HistoryClient, error) {
	conn, err := s.fleet.Conn(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	return pb.NewHistoryClient(conn), nil
}

// historyError keeps the agent's message, which names the checkpoint or says why history
// is unavailable, and its kind: a missing checkpoint is a 404, nothing to undo a 409.
func historyError(op string, r *http.Request, err error) error {
	return fmt.Errorf("%s in sandbox %s: %w", op, r.PathValue("id"), errdefs.FromGRPC(err))
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
