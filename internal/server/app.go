package server

import (
	"net/http"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/origins"
)

// appStatus is GET /api/v1/sandboxes/{id}/app: the supervised app's state, and the URL it
// is served at from the host this request came to.
func (s *Server) appStatus(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	out, err := s.ops.AppStatus(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	out.URL = s.origins.URL(origins.Host{Kind: origins.KindApp, ID: r.PathValue("id")}, r.Host)
	api.WriteJSON(w, http.StatusOK, out)
	return nil
}

// restartUserApp starts the sandbox's app again now, for its owner: the rest of the
// sandbox (its terminals, its other processes) keeps running.
func (s *Server) restartUserApp(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	out, err := s.ops.RestartApp(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	s.event(r.Context(), c.UserID, "sandbox.app_restart", map[string]any{"sandbox": r.PathValue("id"), "by": "user"})
	out.URL = s.origins.URL(origins.Host{Kind: origins.KindApp, ID: r.PathValue("id")}, r.Host)
	api.WriteJSON(w, http.StatusOK, out)
	return nil
}
