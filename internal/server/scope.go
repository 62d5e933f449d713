package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/paddockhq/paddock/internal/auth"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/web"
)

// routeScope is the scope an API token needs for route rt: tokens for the token
// routes, admin for the invite and user routes, write for the exec WebSocket (a GET that runs
// commands), read for recording an MCP tool call (a read-only agent's reads are audited
// too), otherwise read for GET and write for anything else.
func routeScope(rt Route) auth.Scope {
	switch {
	case strings.HasPrefix(rt.Pattern, "/api/v1/tokens"):
		return auth.ScopeTokens
	case strings.HasPrefix(rt.Pattern, "/api/v1/invites"), rt.Pattern == "/api/v1/users":
		return auth.ScopeAdmin
	case rt.Pattern == "/api/v1/sandboxes/{id}/exec/stream":
		return auth.ScopeWrite
	case rt.Method == http.MethodGet, rt.Pattern == "/api/v1/events/mcp":
		return auth.ScopeRead
	}
	return auth.ScopeWrite
}

// checkScope refuses a token caller whose token lacks need, with an event; session
// callers have every scope their user may have.
func (s *Server) checkScope(r *http.Request, c *web.Caller, need auth.Scope, what string) error {
	if need == auth.ScopeAdmin && !c.User.IsAdmin() {
		s.event(r.Context(), c.User.ID, "auth.admin_denied", map[string]any{"request": what})
		return fmt.Errorf("%s is for admins only: %w", what, errdefs.ErrPermissionDenied)
	}
	if c.Token == nil || auth.TokenScopes(*c.Token).Has(need) {
		return nil
	}
	s.event(r.Context(), c.User.ID, "auth.token.scope_denied", map[string]any{
		"token_id": c.Token.ID, "prefix": c.Token.Prefix, "scope": string(need), "request": what})
	return auth.ScopeError(need, what)
}

// isAdmin is whether c acts as an admin: an admin's session, or an admin's token with
// scope admin.
func isAdmin(c *web.Caller) bool {
	return c.User.IsAdmin() && (c.Token == nil || auth.TokenScopes(*c.Token).Has(auth.ScopeAdmin))
}

type webCallerKey struct{}

// webCaller is the authenticated caller that api() put in r's context.
func webCaller(r *http.Request) *web.Caller {
	c, _ := r.Context().Value(webCallerKey{}).(*web.Caller)
	if c == nil {
		return &web.Caller{}
	}
	return c
}

func withWebCaller(ctx context.Context, c *web.Caller) context.Context {
	return context.WithValue(ctx, webCallerKey{}, c)
}
