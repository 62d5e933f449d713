package server

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/capability"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/sandboxops"
)

// Capability tokens (package capability) as credentials on the API.
//
// A sandbox's owner mints a token for it (POST /api/v1/sandboxes/{id}/capabilities) and
// hands it to whatever should act on the sandbox with less than the owner's power — an AI
// agent's tool loop, a build step. The holder sends it as "Authorization: Bearer pdk1.…"
// on the sandbox's exec and file routes, and nowhere else. Every request is checked
// twice:
//
//  1. here, when it arrives (Admit: signature, audience, revocation, subject — the
//     sandbox in the URL, never a field of the request — and the validity window), and
//     again for what it asks (Verify: the file path as the API names it, the programs
//     the command line runs, the size of a write);
//  2. by the sandbox's agent, which gets the token reissued for its own audience with the
//     same claims and caveats (Minter.Reissue, short-lived) and checks it
//     against what it really touches: the path with symlinks resolved inside the
//     workspace, the bytes really read or written.
//
// The owner's policy applies as well; a capability never widens it. Revocation is by
// token ID, in the store, and takes effect at the next request: the reissued agent
// tokens are short-lived. Package sandboxops does the checking.

// CapabilityRotation is what RotateCapabilityKeys did.
type CapabilityRotation = sandboxops.Rotation

// RotateCapabilityKeys adds a new key to the capability keyring of cfg's server and makes
// it primary (sandboxops.RotateKeys). A running server uses it once it reloads (SIGHUP).
func RotateCapabilityKeys(cfg Config) (CapabilityRotation, error) {
	return sandboxops.RotateKeys(cfg.Runner.DataDir)
}

// capabilityRoutes are the routes a capability token may be used on: a sandbox's exec
// and files. Every other route needs a session or an API token.
var capabilityRoutes = map[Route]bool{
	{"POST", "/api/v1/sandboxes/{id}/exec"}:            true,
	{"GET", "/api/v1/sandboxes/{id}/exec/stream"}:      true,
	{"GET", "/api/v1/sandboxes/{id}/files/list"}:       true,
	{"GET", "/api/v1/sandboxes/{id}/files/content"}:    true,
	{"PUT", "/api/v1/sandboxes/{id}/files/content"}:    true,
	{"DELETE", "/api/v1/sandboxes/{id}/files/content"}: true,
	{"POST", "/api/v1/sandboxes/{id}/files/mkdir"}:     true,
	{"POST", "/api/v1/sandboxes/{id}/files/move"}:      true,
	{"GET", "/api/v1/sandboxes/{id}/files/archive"}:    true,
	{"PUT", "/api/v1/sandboxes/{id}/files/archive"}:    true,
}

// capabilityBearer returns the capability token r carries as its bearer credential.
func capabilityBearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || !capability.IsToken(tok) {
		return "", false
	}
	return tok, true
}

// serveCapability runs h for a request whose credential is a capability token: admitted
// for the sandbox the route names, acting as that sandbox's owner (never an admin), with
// the token held in the context for the handler's checks.
func (s *Server) serveCapability(w http.ResponseWriter, r *http.Request, rt Route, h apiHandler, token string) {
	if !capabilityRoutes[rt] {
		api.WriteError(w, s.log, fmt.Errorf("a capability token acts only on its sandbox's exec and file routes; %s %s needs a session or an API token: %w",
			rt.Method, rt.Pattern, errdefs.ErrPermissionDenied))
		return
	}
	id := r.PathValue("id")
	ctx, err := s.ops.AdmitCapability(r.Context(), token, id)
	if err != nil {
		api.WriteError(w, s.log, err)
		return
	}
	rec, err := s.st.SandboxByID(r.Context(), id)
	if err != nil {
		api.WriteError(w, s.log, err)
		return
	}
	c := fleet.Caller{UserID: rec.UserID, Username: rec.Username}
	if err := h(w, r.WithContext(ctx), c); err != nil && !errors.Is(err, errResponded) {
		api.WriteError(w, s.log, err)
	}
}

// The routes: mint, list and revoke a sandbox's capability tokens. Only the owner (or an
// admin) does this, with a session or an API token — never with a capability.

func (s *Server) mintCapability(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	if _, err := s.fleet.Get(r.Context(), c, r.PathValue("id")); err != nil {
		return err // another user's sandbox is not found, whatever the body
	}
	var req api.CapabilityRequest
	if err := api.DecodeJSON(w, r, &req, 16<<10); err != nil {
		return err
	}
	out, err := s.ops.MintCapability(r.Context(), c, r.PathValue("id"), req)
	return writeOr(w, http.StatusCreated, out, err)
}

func (s *Server) listCapabilities(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	out, err := s.ops.ListCapabilities(r.Context(), c, r.PathValue("id"))
	return writeOr(w, http.StatusOK, out, err)
}

func (s *Server) revokeCapability(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	out, err := s.ops.RevokeCapability(r.Context(), c, r.PathValue("id"), r.PathValue("cap"))
	return writeOr(w, http.StatusOK, out, err)
}
