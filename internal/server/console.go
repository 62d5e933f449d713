package server

import (
	"fmt"
	"net/http"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/origins"
)

// What the console (internal/web's /console) needs of the server: the link to a
// sandbox's desktop, and the admins' list of accounts.

// desktopHandoff is the handoff URL that takes a signed-in browser to sandbox id's
// desktop host; the handoff checks that the sandbox is the caller's.
func (s *Server) desktopHandoff(r *http.Request, id string) (string, error) {
	h, err := origins.ParseLabel(string(origins.KindDesktop) + "-" + id)
	if err != nil || h.Kind != origins.KindDesktop {
		return "", fmt.Errorf("sandbox %q: not a sandbox ID (sb- and 10 letters or digits): %w", errdefs.Clip(id, 40), errdefs.ErrNotFound)
	}
	return origins.HandoffPath(s.origins.URL(h, r.Host)), nil
}

// listUsers: GET /api/v1/users, every account, for admins (the route needs scope admin).
func (s *Server) listUsers(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	if !c.Admin {
		return s.fleetDenied("listing users")
	}
	users, err := s.st.ListUsers(r.Context())
	if err != nil {
		return err
	}
	out := api.UserList{Users: []api.AccountInfo{}}
	for _, u := range users {
		out.Users = append(out.Users, api.AccountInfo{ID: u.ID, Username: u.Username, Role: u.Role, CreatedAt: u.CreatedAt})
	}
	api.WriteJSON(w, http.StatusOK, out)
	return nil
}
