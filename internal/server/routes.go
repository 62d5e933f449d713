package server

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/auth"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/httpmetrics"
	"github.com/paddockhq/paddock/internal/runner"
)

// errResponded tells the API wrapper that a handler wrote its own response (a stream, a
// WebSocket) and nothing more is to be written.
var errResponded = errors.New("response written")

// apiHandler handles an authenticated API request. An error it returns is answered in the
// API's error shape.
type apiHandler func(w http.ResponseWriter, r *http.Request, c fleet.Caller) error

// Route is one route of the API, as api/openapi.yaml documents it.
type Route struct {
	Method, Pattern string
}

// routeTable is every authenticated API route: those under /api/v1, and /me/secrets (the
// seed's path, ADR-0003, also served under /api/v1). The OpenAPI test checks the file
// against it.
func (s *Server) routeTable() map[Route]apiHandler {
	return map[Route]apiHandler{
		{"GET", "/me/secrets"}:                                          s.listSecrets,
		{"PUT", "/me/secrets/{name}"}:                                   s.putSecret,
		{"DELETE", "/me/secrets/{name}"}:                                s.deleteSecret,
		{"GET", "/api/v1/me/secrets"}:                                   s.listSecrets,
		{"PUT", "/api/v1/me/secrets/{name}"}:                            s.putSecret,
		{"DELETE", "/api/v1/me/secrets/{name}"}:                         s.deleteSecret,
		{"GET", "/api/v1/me"}:                                           s.me,
		{"GET", "/api/v1/me/agent"}:                                     s.getAgentChoice,
		{"PUT", "/api/v1/me/agent"}:                                     s.putAgentChoice,
		{"GET", "/api/v1/sandboxes"}:                                    s.listSandboxes,
		{"POST", "/api/v1/sandboxes"}:                                   s.createSandbox,
		{"GET", "/api/v1/sandboxes/{id}"}:                               s.getSandbox,
		{"DELETE", "/api/v1/sandboxes/{id}"}:                            s.deleteSandbox,
		{"POST", "/api/v1/sandboxes/{id}/stop"}:                         s.lifecycle((*fleet.Fleet).Stop),
		{"POST", "/api/v1/sandboxes/{id}/start"}:                        s.lifecycle((*fleet.Fleet).Start),
		{"POST", "/api/v1/sandboxes/{id}/restart"}:                      s.lifecycle((*fleet.Fleet).Restart),
		{"POST", "/api/v1/sandboxes/{id}/exec"}:                         s.exec,
		{"GET", "/api/v1/sandboxes/{id}/exec/stream"}:                   s.execStream,
		{"GET", "/api/v1/sandboxes/{id}/files/list"}:                    s.listFiles,
		{"GET", "/api/v1/sandboxes/{id}/files/content"}:                 s.readFile,
		{"PUT", "/api/v1/sandboxes/{id}/files/content"}:                 s.writeFile,
		{"DELETE", "/api/v1/sandboxes/{id}/files/content"}:              s.removeFile,
		{"POST", "/api/v1/sandboxes/{id}/files/mkdir"}:                  s.makeDir,
		{"POST", "/api/v1/sandboxes/{id}/files/move"}:                   s.moveFile,
		{"GET", "/api/v1/sandboxes/{id}/files/archive"}:                 s.getArchive,
		{"PUT", "/api/v1/sandboxes/{id}/files/archive"}:                 s.putArchive,
		{"GET", "/api/v1/sandboxes/{id}/policy"}:                        s.getPolicy,
		{"PUT", "/api/v1/sandboxes/{id}/policy"}:                        s.putPolicy,
		{"DELETE", "/api/v1/sandboxes/{id}/policy"}:                     s.deletePolicy,
		{"GET", "/api/v1/sandboxes/{id}/app"}:                           s.appStatus,
		{"PUT", "/api/v1/sandboxes/{id}/app"}:                           s.setApp,
		{"POST", "/api/v1/sandboxes/{id}/app/{step}"}:                   s.appStep,
		{"POST", "/api/v1/sandboxes/{id}/app/restart"}:                  s.restartUserApp,
		{"GET", "/api/v1/artifacts"}:                                    s.listArtifacts,
		{"GET", "/api/v1/artifacts/{artifact}"}:                         s.getArtifact,
		{"GET", "/api/v1/artifacts/{artifact}/archive"}:                 s.downloadArtifact,
		{"GET", "/api/v1/artifacts/{artifact}/sbom"}:                    s.artifactSBOM,
		{"POST", "/api/v1/artifacts/{artifact}/release"}:                s.releaseArtifact,
		{"DELETE", "/api/v1/artifacts/{artifact}"}:                      s.deleteArtifact,
		{"GET", "/api/v1/sandboxes/{id}/capabilities"}:                  s.listCapabilities,
		{"POST", "/api/v1/sandboxes/{id}/capabilities"}:                 s.mintCapability,
		{"DELETE", "/api/v1/sandboxes/{id}/capabilities/{cap}"}:         s.revokeCapability,
		{"GET", "/api/v1/sandboxes/{id}/history"}:                       s.history,
		{"POST", "/api/v1/sandboxes/{id}/history/checkpoints"}:          s.createCheckpoint,
		{"POST", "/api/v1/sandboxes/{id}/history/undo"}:                 s.undo,
		{"POST", "/api/v1/sandboxes/{id}/history/redo"}:                 s.redo,
		{"POST", "/api/v1/sandboxes/{id}/history/restore"}:              s.restoreCheckpoint,
		{"POST", "/api/v1/sandboxes/{id}/fork"}:                         s.forkSandbox,
		{"GET", "/api/v1/sandboxes/{id}/history/diff"}:                  s.historyDiff,
		{"POST", "/api/v1/sandboxes/{id}/history/transaction"}:          s.beginTransaction,
		{"POST", "/api/v1/sandboxes/{id}/history/transaction/commit"}:   s.commitTransaction,
		{"POST", "/api/v1/sandboxes/{id}/history/transaction/rollback"}: s.rollbackTransaction,
		{"GET", "/api/v1/sandboxes/{id}/history/export"}:                s.exportHistory,
		{"POST", "/api/v1/sandboxes/{id}/history/import"}:               s.importHistory,
		{"GET", "/api/v1/sandboxes/{id}/history/events"}:                s.historyEvents,
		{"POST", "/api/v1/sandboxes/{id}/backups"}:                      s.backupNow,
		{"GET", "/api/v1/sandboxes/{id}/backups"}:                       s.listBackups,
		{"POST", "/api/v1/sandboxes/{id}/backups/restore"}:              s.restoreBackup,
		{"GET", "/api/v1/backups"}:                                      s.backupSandboxes,
		{"POST", "/api/v1/backups/prune"}:                               s.pruneBackups,
		{"GET", "/api/v1/roles"}:                                        s.roles,
		{"POST", "/api/v1/promote"}:                                     s.promote,
		{"GET", "/api/v1/tokens"}:                                       s.listTokens,
		{"POST", "/api/v1/tokens"}:                                      s.createToken,
		{"DELETE", "/api/v1/tokens/{id}"}:                               s.revokeToken,
		{"GET", "/api/v1/invites"}:                                      s.listInvites,
		{"POST", "/api/v1/invites"}:                                     s.createInvite,
		{"DELETE", "/api/v1/invites/{id}"}:                              s.revokeInvite,
		{"GET", "/api/v1/events"}:                                       s.events,
		{"POST", "/api/v1/events/mcp"}:                                  s.recordMCPToolCall,
		{"GET", "/api/v1/users"}:                                        s.listUsers,
	}
}

// Routes lists the API's routes (for the OpenAPI test).
func (s *Server) Routes() []Route {
	var out []Route
	for r := range s.routeTable() {
		out = append(out, r)
	}
	return out
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	s.web.Register(mux)
	for rt, h := range s.routeTable() {
		mux.Handle(rt.Method+" "+rt.Pattern, s.api(rt, h))
	}
	// What no route matched under the control plane's own prefixes is answered here (404
	// or 405), never proxied: a secret PUT with a wrong method must not reach a sandbox.
	for _, prefix := range []string{"/api/v1/", "/me/secrets", "/me/secrets/"} {
		mux.Handle(prefix, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.apiFallback(mux, strings.TrimSuffix(prefix, "/"), w, r)
		}))
	}
	// MCP over streamable HTTP (package mcp): POST carries the client's messages; GET
	// and DELETE are answered 405, the handler being stateless.
	mux.Handle("/mcp", s.mcpHandler())
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.Handle("GET /metrics", s.metrics())
	mux.HandleFunc("/auth/handoff", s.handoff)
	mux.HandleFunc("GET /desktop", s.openDesktop)
	mux.HandleFunc("/", s.app)
	s.desktop = s.desktopRoutes()
	return s.acceptHops(s.byHost(s.instrument(mux)))
}

// api authenticates a request (session cookie, API token, or a capability token on the
// routes that take one), applies CSRF protection to state-changing requests made with a
// cookie, checks an API token's scope (routeScope), and runs h, route rt's handler. A
// token without scope admin acts as a plain user even for an admin.
func (s *Server) api(rt Route, h apiHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := sandboxOfRoute(rt, r)
		if tok, ok := capabilityBearer(r); ok {
			// The replica that runs the sandbox checks the capability.
			if s.forwardIfElsewhere(w, r, id, "", false) {
				return
			}
			s.serveCapability(w, r, rt, h, tok)
			return
		}
		c, err := s.web.Identify(r)
		if err != nil {
			api.WriteError(w, s.log, err)
			return
		}
		if err := s.web.CheckCSRF(r, c); err != nil {
			api.WriteError(w, s.log, err)
			return
		}
		if err := s.checkScope(r, c, routeScope(rt), rt.Method+" "+rt.Pattern); err != nil {
			api.WriteError(w, s.log, err)
			return
		}
		// A sandbox another replica runs is served there: the request goes as it came,
		// credentials and all, and that replica authenticates it again. Its record is in
		// the database, and served here.
		if !s.recordOnly(rt) && s.forwardIfElsewhere(w, r, id, "", rt == Route{"DELETE", "/api/v1/sandboxes/{id}"}) {
			return
		}
		fc := fleet.Caller{UserID: c.User.ID, Username: c.User.Username, Admin: isAdmin(c)}
		r = r.WithContext(withWebCaller(r.Context(), c))
		if err := h(w, r, fc); err != nil && !errors.Is(err, errResponded) {
			api.WriteError(w, s.log, err)
		}
	})
}

// recordOnly reports a route whose answer is the sandbox's record alone, which any replica
// reads from the database. On a cluster the record names the node the sandbox runs on,
// which only its replica knows.
func (s *Server) recordOnly(rt Route) bool {
	return rt == Route{"GET", "/api/v1/sandboxes/{id}"} && !s.cfg.Runner.OnCluster()
}

// sandboxOfRoute is the sandbox a request to route rt is about, or "".
func sandboxOfRoute(rt Route, r *http.Request) string {
	if !strings.Contains(rt.Pattern, "{id}") || !strings.HasPrefix(rt.Pattern, "/api/v1/sandboxes/") {
		return ""
	}
	if id := r.PathValue("id"); runner.ValidID(id) {
		return id
	}
	return ""
}

// apiFallback answers what no API route under prefix matched: 405 with Allow when the
// path exists under another method, 404 otherwise. Nothing under /api/v1/ or /me/secrets
// ever reaches a sandbox (other /api/ and /me/ paths are the app's).
func (s *Server) apiFallback(mux *http.ServeMux, prefix string, w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{"GET", "POST", "PUT", "DELETE"} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := mux.Handler(probe); strings.HasPrefix(pattern, m+" "+prefix) {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		api.WriteErrorCode(w, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed,
			fmt.Sprintf("%s %s: use %s", r.Method, r.URL.Path, strings.Join(allow, " or ")))
		return
	}
	api.WriteErrorCode(w, http.StatusNotFound, api.CodeNotFound, fmt.Sprintf("no API endpoint %s; see api/openapi.yaml", r.URL.Path))
}

func (s *Server) me(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	role := "user"
	if c.Admin {
		role = "admin"
	}
	wc := webCaller(r)
	scopes := auth.UserScopes(wc.User)
	if wc.Token != nil {
		scopes = auth.TokenScopes(*wc.Token)
	}
	api.WriteJSON(w, http.StatusOK, api.User{ID: c.UserID, Username: c.Username, Role: role, Scopes: scopes.Strings()})
	return nil
}

func invalidQuery(name, value, want string) error {
	return fmt.Errorf("query parameter %s=%q: want %s: %w", name, value, want, errdefs.ErrInvalidArgument)
}

// instrument counts the control plane's own requests by route pattern. Proxied requests
// are counted by the proxy, by role.
func (s *Server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		sw := &httpmetrics.StatusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if r.Pattern == "/" {
			return
		}
		pattern := r.Pattern
		if pattern == "" {
			pattern = "unmatched"
		}
		s.m.requests.WithLabelValues(pattern, fmt.Sprint(sw.Status())).Inc()
		s.m.latency.WithLabelValues(pattern).Observe(time.Since(began).Seconds())
	})
}
