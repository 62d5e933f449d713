package server

import (
	"context"
	"net/http"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/sandboxops"
	"github.com/paddockhq/paddock/internal/store"
)

// The lifecycle API: /api/v1/sandboxes, /api/v1/roles, /api/v1/promote. Ownership is
// checked by the fleet: another user's sandbox is "not found", as a missing one is.

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	all := false
	switch v := r.URL.Query().Get("all"); v {
	case "", "false", "0":
	case "true", "1":
		all = true
	default:
		return invalidQuery("all", v, "true or false")
	}
	list, err := s.fleet.List(r.Context(), c, all)
	if err != nil {
		return err
	}
	out := api.SandboxList{Sandboxes: []api.Sandbox{}}
	owner := c.UserID
	if all {
		owner = ""
	}
	roles := s.roleIndex(r.Context(), owner)
	for _, sb := range list {
		out.Sandboxes = append(out.Sandboxes, s.toAPI(sb, roles[sb.ID]))
	}
	api.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	var req api.CreateSandboxRequest
	if err := api.DecodeJSON(w, r, &req, 0); err != nil {
		return err
	}
	sb, err := s.create(r.Context(), c, req)
	if err != nil && sb.ID == "" {
		return err
	}
	// A sandbox that was recorded but failed to start is answered as it is (state
	// failed, with the reason): it exists, and the caller may start or delete it.
	w.Header().Set("Location", "/api/v1/sandboxes/"+sb.ID)
	api.WriteJSON(w, http.StatusCreated, s.toAPI(sb, ""))
	return nil
}

// create makes a sandbox for c, its limits set by c's policy (theirs, or the default).
func (s *Server) create(ctx context.Context, c fleet.Caller, req api.CreateSandboxRequest) (store.Sandbox, error) {
	in, err := s.pol.ForNew(c.Username)
	if err != nil {
		return store.Sandbox{}, err
	}
	if p := in.Policy(); p != nil {
		if err := sandboxops.PolicyLimits(&req.Limits, p.Resources()); err != nil {
			return store.Sandbox{}, err
		}
	}
	return s.fleet.Create(ctx, c, req)
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	sb, err := s.fleet.Get(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	return s.writeSandbox(w, r, http.StatusOK, sb)
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	if err := s.fleet.Delete(r.Context(), c, r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// lifecycle is the handler of POST /api/v1/sandboxes/{id}/{stop,start,restart}.
func (s *Server) lifecycle(op func(*fleet.Fleet, context.Context, fleet.Caller, string) (store.Sandbox, error)) apiHandler {
	return func(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
		sb, err := op(s.fleet, r.Context(), c, r.PathValue("id"))
		if err != nil && sb.ID == "" {
			return err
		}
		if err != nil && sb.State != api.StateFailed {
			return err
		}
		return s.writeSandbox(w, r, http.StatusOK, sb)
	}
}

func (s *Server) writeSandbox(w http.ResponseWriter, r *http.Request, status int, sb store.Sandbox) error {
	role, err := s.fleet.RoleOf(r.Context(), sb.UserID, sb.ID)
	if err != nil {
		return err
	}
	api.WriteJSON(w, status, s.toAPI(sb, role))
	return nil
}

func (s *Server) roles(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	live, dev, gen, err := s.fleet.Roles(r.Context(), c)
	if err != nil {
		return err
	}
	s.writeRoles(w, api.Roles{Live: s.toAPI(live, api.RoleLive), Dev: s.toAPI(dev, api.RoleDev), Generation: gen})
	return nil
}

// writeRoles answers the caller's two standing sandboxes.
func (s *Server) writeRoles(w http.ResponseWriter, roles api.Roles) {
	api.WriteJSON(w, http.StatusOK, roles)
}

// roleIndex maps sandbox IDs to the role they hold, for listings: userID's, or everyone's
// when userID is empty.
func (s *Server) roleIndex(ctx context.Context, userID string) map[string]string {
	var all []store.Roles
	var err error
	if userID == "" {
		all, err = s.st.AllRoles(ctx)
	} else {
		var r store.Roles
		r, err = s.st.RolesOf(ctx, userID)
		all = []store.Roles{r}
	}
	if err != nil {
		s.log.Warn("roles for listing", "err", err)
		return nil
	}
	idx := make(map[string]string, 2*len(all))
	for _, r := range all {
		idx[r.LiveID], idx[r.DevID] = api.RoleLive, api.RoleDev
	}
	delete(idx, "")
	return idx
}

// toAPI is sb as the API shows it, with the node its running handle is on.
func (s *Server) toAPI(sb store.Sandbox, role string) api.Sandbox {
	return api.Sandbox{
		ID: sb.ID, Owner: sb.UserID, OwnerName: sb.Username, Name: sb.Name, Role: role,
		Tier: sb.Tier, Runtime: sb.Runtime, State: sb.State, Error: sb.Error, Node: s.fleet.Node(sb.ID),
		Limits: sandboxops.APILimits(sb),
		App:    api.Template{Command: sb.App.Command, Port: sb.App.Port, Build: sb.App.Build, Dir: sb.App.Dir, HotReload: sb.App.HotReload, Provider: sb.App.Provider},
		Env:    sb.Env, CreatedAt: sb.CreatedAt, UpdatedAt: sb.UpdatedAt,
	}
}
