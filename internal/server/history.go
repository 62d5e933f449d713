package server

import (
	"fmt"
	"net/http"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
)

// The history routes relay to package sandboxops, which asks the sandbox's agent.

// maxHistoryBody bounds a history request's body.
const maxHistoryBody = 16 << 10

func (s *Server) history(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	out, err := s.ops.History(r.Context(), c, r.PathValue("id"))
	return writeOr(w, http.StatusOK, out, err)
}

// reachFirst refuses a running sandbox the caller may not reach before the request's body
// is read: another user's is not found, whatever the body says.
func (s *Server) reachFirst(r *http.Request, c fleet.Caller) error {
	_, err := s.fleet.Handle(r.Context(), c, r.PathValue("id"))
	return err
}

// writeOr answers out with status, or err.
func writeOr(w http.ResponseWriter, status int, out any, err error) error {
	if err != nil {
		return err
	}
	api.WriteJSON(w, status, out)
	return nil
}

// createCheckpoint answers 201 with a new checkpoint, or 200 with the current one when
// nothing changed since it.
func (s *Server) createCheckpoint(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	if err := s.reachFirst(r, c); err != nil {
		return err
	}
	var req api.CheckpointRequest
	if r.ContentLength != 0 { // a bare POST is a checkpoint without a message
		if err := api.DecodeJSON(w, r, &req, maxHistoryBody); err != nil {
			return err
		}
	}
	out, err := s.ops.Checkpoint(r.Context(), c, r.PathValue("id"), req)
	status := http.StatusOK
	if out.Created {
		status = http.StatusCreated
	}
	return writeOr(w, status, out, err)
}

func (s *Server) undo(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	out, err := s.ops.Undo(r.Context(), c, r.PathValue("id"))
	return writeOr(w, http.StatusOK, out, err)
}

func (s *Server) redo(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	out, err := s.ops.Redo(r.Context(), c, r.PathValue("id"))
	return writeOr(w, http.StatusOK, out, err)
}

func (s *Server) restoreCheckpoint(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	if err := s.reachFirst(r, c); err != nil {
		return err
	}
	var req api.RestoreRequest
	if err := api.DecodeJSON(w, r, &req, maxHistoryBody); err != nil {
		return err
	}
	out, err := s.ops.Restore(r.Context(), c, r.PathValue("id"), req)
	return writeOr(w, http.StatusOK, out, err)
}

// forkSandbox answers 201 with the new sandbox and the checkpoint it starts from.
func (s *Server) forkSandbox(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	if _, err := s.fleet.Get(r.Context(), c, r.PathValue("id")); err != nil {
		return err
	}
	var req api.ForkRequest
	if err := api.DecodeJSON(w, r, &req, maxHistoryBody); err != nil {
		return err
	}
	sb, out, err := s.ops.Fork(r.Context(), c, r.PathValue("id"), req)
	if err != nil {
		return err
	}
	out.Sandbox = s.toAPI(sb, "")
	w.Header().Set("Location", "/api/v1/sandboxes/"+sb.ID)
	api.WriteJSON(w, http.StatusCreated, out)
	return nil
}

// beginTransaction answers 201 with the transaction begun, or 409 naming the one open.
func (s *Server) beginTransaction(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	if err := s.reachFirst(r, c); err != nil {
		return err
	}
	var req api.BeginRequest
	if r.ContentLength != 0 { // a bare POST is a transaction without a message
		if err := api.DecodeJSON(w, r, &req, maxHistoryBody); err != nil {
			return err
		}
	}
	out, err := s.ops.Begin(r.Context(), c, r.PathValue("id"), req)
	return writeOr(w, http.StatusCreated, out, err)
}

func (s *Server) commitTransaction(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	out, err := s.ops.Commit(r.Context(), c, r.PathValue("id"))
	return writeOr(w, http.StatusOK, out, err)
}

func (s *Server) rollbackTransaction(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	out, err := s.ops.Rollback(r.Context(), c, r.PathValue("id"))
	return writeOr(w, http.StatusOK, out, err)
}

// exportHistory streams the sandbox's history as one file. The first chunk is awaited
// before the status is written, so that a refusal (a transaction open) is still a 409.
func (s *Server) exportHistory(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	id := r.PathValue("id")
	d, err := s.ops.ExportHistory(r.Context(), c, id)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="`+id+`.history"`)
	w.WriteHeader(http.StatusOK)
	_, _ = d.WriteTo(w)
	return errResponded
}

// importHistory streams the request body, an export, to the agent.
func (s *Server) importHistory(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	out, err := s.ops.ImportHistory(r.Context(), c, r.PathValue("id"), r.Body)
	return writeOr(w, http.StatusOK, out, err)
}

func (s *Server) historyDiff(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	q := r.URL.Query()
	var lines bool
	switch v := q.Get("lines"); v {
	case "", "false", "0":
	case "true", "1":
		lines = true
	default:
		return fmt.Errorf("lines=%q: want true or false: %w", errdefs.Clip(v, 32), errdefs.ErrInvalidArgument)
	}
	out, err := s.ops.Diff(r.Context(), c, r.PathValue("id"), q.Get("from"), q.Get("to"), lines)
	return writeOr(w, http.StatusOK, out, err)
}
