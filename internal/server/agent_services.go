package server

import (
	"fmt"
	"net/http"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/broker"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/wire"
)

// handleAgentServices serves the coding agent in a sandbox (paddock-agent code) on the
// host's services: a transaction per turn (or a checkpoint at its end), undo, and the
// app's state. Each
// acts on the sandbox the connection belongs to, as its owner would through the API.
func (s *Server) handleAgentServices(mux *http.ServeMux) {
	mux.HandleFunc("POST "+wire.ServicesCheckpointPath, s.fromSandbox(s.createCheckpoint))
	mux.HandleFunc("POST "+wire.ServicesUndoPath, s.fromSandbox(s.undo))
	mux.HandleFunc("POST "+wire.ServicesBeginPath, s.fromSandbox(s.beginTransaction))
	mux.HandleFunc("POST "+wire.ServicesCommitPath, s.fromSandbox(s.commitTransaction))
	mux.HandleFunc("POST "+wire.ServicesRollbackPath, s.fromSandbox(s.rollbackTransaction))
	mux.HandleFunc("GET "+wire.ServicesHistoryPath, s.fromSandbox(s.history))
	mux.HandleFunc("GET "+wire.ServicesAppPath, s.fromSandbox(s.appStatus))
	mux.HandleFunc("POST "+wire.ServicesAppRestartPath, s.fromSandbox(s.restartApp))
}

// fromSandbox runs an API handler for the sandbox whose channel the request came on, with
// its owner as the caller: the sandbox names neither.
func (s *Server) fromSandbox(h func(http.ResponseWriter, *http.Request, fleet.Caller) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, _ := broker.SandboxFrom(r.Context())
		rec, ok := s.fleet.RunningRecord(id)
		if !ok {
			api.WriteError(w, s.log, fmt.Errorf("sandbox %s is not running: %w", id, errdefs.ErrFailedPrecondition))
			return
		}
		r.SetPathValue("id", id)
		if err := h(w, r, fleet.Caller{UserID: rec.UserID, Username: rec.Username}); err != nil {
			api.WriteError(w, s.log, err)
		}
	}
}

// restartApp starts the sandbox's app again for its coding agent.
func (s *Server) restartApp(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	out, err := s.ops.RestartApp(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	s.event(r.Context(), c.UserID, "sandbox.app_restart", map[string]any{"sandbox": r.PathValue("id"), "by": "agent"})
	api.WriteJSON(w, http.StatusOK, out)
	return nil
}
