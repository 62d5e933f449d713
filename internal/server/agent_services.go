package server

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"

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
	mux.HandleFunc("GET "+wire.ServicesAgentStatePath+"{name}", s.fromSandbox(s.getAgentState))
	mux.HandleFunc("PUT "+wire.ServicesAgentStatePath+"{name}", s.fromSandbox(s.putAgentState))
}

// agentStateFiles are the files of the coding agent's conversation the host keeps for a
// sandbox, and the most each may hold (the harness's own bounds, and a turn's events).
var agentStateFiles = map[string]int64{"conversation.json": 64 << 20, "events.jsonl": 16 << 20}

// agentStatePath is where the host keeps the sandbox's file name, and its bound.
func (s *Server) agentStatePath(c fleet.Caller, id, name string) (string, int64, error) {
	max, ok := agentStateFiles[name]
	if !ok {
		return "", 0, fmt.Errorf("agent state %q: want conversation.json or events.jsonl: %w", errdefs.Clip(name, 64), errdefs.ErrInvalidArgument)
	}
	// The user's directory is named as the fleet names it: the username, lower-cased.
	dir, err := s.runner.AgentStateDir(strings.ToLower(c.Username), id)
	if err != nil {
		return "", 0, err
	}
	return filepath.Join(dir, name), max, nil
}

// getAgentState answers a kept file of the sandbox's agent conversation.
func (s *Server) getAgentState(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	path, _, err := s.agentStatePath(c, r.PathValue("id"), r.PathValue("name"))
	if err != nil {
		return err
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("agent state %s: none kept: %w", r.PathValue("name"), errdefs.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("agent state: %w", err)
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	_, err = io.Copy(w, f)
	if err != nil {
		s.log.Warn("agent state: sending", "sandbox", r.PathValue("id"), "err", err)
	}
	return nil
}

// putAgentState keeps a file of the sandbox's agent conversation, whole or not at all.
func (s *Server) putAgentState(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	path, max, err := s.agentStatePath(c, r.PathValue("id"), r.PathValue("name"))
	if err != nil {
		return err
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if _, over := errors.AsType[*http.MaxBytesError](err); over {
		return fmt.Errorf("agent state %s: over %d bytes: %w", r.PathValue("name"), max, errdefs.ErrLimitExceeded)
	}
	if err != nil {
		return fmt.Errorf("agent state: reading the body: %w", errdefs.ErrInvalidArgument)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("agent state: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("agent state: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("agent state: %w", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
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
