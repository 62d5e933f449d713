package server

import (
	"fmt"
	"mime"
	"net/http"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/fleet"
)

// The files archive copies a tree in or out as a tar stream (package sandboxops says how
// each entry is decided and reaches the agent).

// getArchive answers the tree at ?path= as a tar archive. Everything is listed and
// decided before the first byte is sent, so that a missing path or a refused file is an
// error response; a failure after that aborts the connection, so that a client never
// takes a cut archive for a whole one.
func (s *Server) getArchive(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	a, err := s.ops.GetArchive(r.Context(), c, r.PathValue("id"), r.URL.Query().Get("path"))
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", api.ContentTypeTar)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": a.Name + ".tar"}))
	w.WriteHeader(http.StatusOK)
	if err := a.Write(r.Context(), w); err != nil {
		panic(http.ErrAbortHandler)
	}
	return errResponded
}

// putArchive extracts the tar archive in the body into the directory ?path=.
func (s *Server) putArchive(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != api.ContentTypeTar && mt != "application/octet-stream") {
			return fmt.Errorf("Content-Type %q: want %s: %w", ct, api.ContentTypeTar, api.ErrUnsupportedMedia)
		}
	}
	res, err := s.ops.PutArchive(r.Context(), c, r.PathValue("id"), r.URL.Query().Get("path"), r.Body)
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, res)
	return nil
}
