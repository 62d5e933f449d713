package server

import (
	"fmt"
	"net/http"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/auth"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/web"
)

// appGate decides whether caller c's request for the app may go on to a sandbox, and
// answers it when not. A token needs scope write. A signed-in browser whose sandboxes
// were never made is offered them, not given them (its favicon request included): page
// loads go to start, the control plane's /start page (303), anything else gets 409, so an
// account that only signed in costs no sandbox. An API token asks by using the app.
func (s *Server) appGate(w http.ResponseWriter, r *http.Request, c *web.Caller, start string) bool {
	if err := s.checkScope(r, c, auth.ScopeWrite, "the sandbox's app"); err != nil {
		api.WriteError(w, s.log, err)
		return false
	}
	if c.Session == nil {
		return true
	}
	has, err := s.fleet.HasRoles(r.Context(), c.User.ID)
	switch {
	case err != nil:
		api.WriteError(w, s.log, err)
		return false
	case has:
		return true
	case isNavigation(r):
		http.Redirect(w, r, start, http.StatusSeeOther)
		return false
	}
	api.WriteError(w, s.log, fmt.Errorf("your sandboxes have not been made yet: open /start, or POST /auth/start: %w", errdefs.ErrFailedPrecondition))
	return false
}
