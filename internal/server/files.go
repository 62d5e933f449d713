package server

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/sandboxops"
)

// The file routes: paths are relative to the workspace (package sandboxops says how they
// are decided and reach the agent).

// maxFileOpBody bounds a mkdir or move request: two paths of at most PATH_MAX, escaped.
const maxFileOpBody = 64 << 10

func filePath(r *http.Request) (string, error) {
	p := r.URL.Query().Get("path")
	if p == "" {
		return "", fmt.Errorf("query parameter path: give a path in the workspace, e.g. ?path=src/main.go: %w", errdefs.ErrInvalidArgument)
	}
	return p, nil
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	out, err := s.ops.ListFiles(r.Context(), c, r.PathValue("id"), r.URL.Query().Get("path"))
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, out)
	return nil
}

// readFile answers the file's content. The first chunk (or the error) comes before any
// header is written, so that a missing file is a 404, not a 200 with an empty body.
func (s *Server) readFile(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	p, err := filePath(r)
	if err != nil {
		return err
	}
	d, err := s.ops.ReadFile(r.Context(), c, r.PathValue("id"), p)
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Disposition", "attachment")
	w.WriteHeader(http.StatusOK)
	_, _ = d.WriteTo(w)
	return errResponded
}

func (s *Server) writeFile(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	p, err := filePath(r)
	if err != nil {
		return err
	}
	mode := uint64(0o644)
	if m := r.URL.Query().Get("mode"); m != "" {
		if mode, err = strconv.ParseUint(m, 8, 32); err != nil || mode > 0o777 {
			return invalidQuery("mode", m, "an octal permission like 644")
		}
	}
	// The policy decides on the size the body says it has (a chunked body starts at 0).
	req := sandboxops.WriteRequest{Path: p, Mode: uint32(mode), Size: r.ContentLength}
	info, err := s.ops.WriteFile(r.Context(), c, r.PathValue("id"), req, r.Body)
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, info)
	return nil
}

func (s *Server) makeDir(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	var req api.FileMkdirRequest
	if err := api.DecodeJSON(w, r, &req, maxFileOpBody); err != nil {
		return err
	}
	info, err := s.ops.Mkdir(r.Context(), c, r.PathValue("id"), req)
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, info)
	return nil
}

func (s *Server) moveFile(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	var req api.FileMoveRequest
	if err := api.DecodeJSON(w, r, &req, maxFileOpBody); err != nil {
		return err
	}
	info, err := s.ops.Move(r.Context(), c, r.PathValue("id"), req)
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, info)
	return nil
}

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	p, err := filePath(r)
	if err != nil {
		return err
	}
	recursive := false
	if v := r.URL.Query().Get("recursive"); v != "" {
		if recursive, err = strconv.ParseBool(v); err != nil {
			return invalidQuery("recursive", v, "true or false")
		}
	}
	if err := s.ops.Remove(r.Context(), c, r.PathValue("id"), p, recursive); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
