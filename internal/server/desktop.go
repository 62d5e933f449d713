package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/origins"
	"github.com/paddockhq/paddock/internal/web"
	"github.com/paddockhq/paddock/internal/wire"
)

// A sandbox's desktop (desktop-<sandbox ID> under the apps domain) is its owner's web
// desktop: files, terminal, timeline, preview. Its page and assets come from the sandbox's
// agent (wire.DesktopPort), never from the app, so that it works while the app is down.
// The page calls the API on its own origin: the routes desktopRoute lists, for that one
// sandbox, through the same handlers (policy, capabilities, audit) as the control plane's
// API, with the host's cookie as the caller. Everything else under /api/ is 404 there.
//
// CSRF: every apps host is same-site with the desktop (one apps domain), so SameSite
// cookies do not keep an app's page from sending the desktop's cookie. A state-changing
// request or a WebSocket upgrade must carry the desktop's own Origin.

type desktopKey struct{}

// desktopRequest is what serveDesktop hands the desktop's routes.
type desktopRequest struct {
	host origins.Host
	who  *web.Caller
}

// desktopRoute says whether the desktop host serves API route rt: a sandbox's own
// files, exec (and its terminal stream), history, app state, provider steps and restart,
// and its owner's choice of provider and model for the Agent pane. Secrets, tokens,
// promotion, policy, capabilities, other sandboxes and the rest of the account are the
// control plane's.
func desktopRoute(rt Route) bool {
	if rt.Pattern == "/api/v1/me/agent" {
		return true
	}
	rest, ok := strings.CutPrefix(rt.Pattern, "/api/v1/sandboxes/{id}")
	if !ok {
		return false
	}
	switch rest {
	case "":
		return rt.Method == http.MethodGet
	case "/restart", "/exec", "/exec/stream", "/app", "/app/restart", "/app/{step}",
		"/history", "/history/checkpoints", "/history/undo", "/history/redo", "/history/restore",
		"/history/diff", "/history/events":
		return true
	}
	return strings.HasPrefix(rest, "/files/")
}

// desktopRoutes is the desktop hosts' handler, past authentication (serveDesktop).
func (s *Server) desktopRoutes() http.Handler {
	mux := http.NewServeMux()
	for rt, h := range s.routeTable() {
		if desktopRoute(rt) {
			mux.Handle(rt.Method+" "+rt.Pattern, s.desktopAPI(rt, h))
		}
	}
	notHere := func(w http.ResponseWriter, r *http.Request) {
		api.WriteErrorCode(w, http.StatusNotFound, api.CodeNotFound,
			fmt.Sprintf("%s %s: not served on a desktop host, which serves its own sandbox's files, exec, history and app; use the control plane's API", r.Method, r.URL.Path))
	}
	for _, p := range []string{"/api/", "/me/secrets", "/me/secrets/", "/auth/"} {
		mux.HandleFunc(p, notHere)
	}
	mux.HandleFunc("GET /desktop/preview", s.desktopPreview)
	mux.HandleFunc("GET /desktop/switch", s.desktopSwitch)
	mux.HandleFunc("/", s.desktopAsset)
	return mux
}

// serveDesktop serves a desktop host to who, its sandbox's owner.
func (s *Server) serveDesktop(w http.ResponseWriter, r *http.Request, h origins.Host, who *web.Caller) {
	// The desktop may not be framed (clickjacking from an app's page); its own page frames
	// the app, on the app's host.
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Referrer-Policy", "no-referrer")
	if err := s.checkDesktopOrigin(r, h); err != nil {
		api.WriteError(w, s.log, err)
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), desktopKey{}, desktopRequest{host: h, who: who}))
	s.desktop.ServeHTTP(w, r)
}

// checkDesktopOrigin refuses a state-changing request or a WebSocket upgrade whose
// Origin is not the desktop's own: a page on another apps host (same site) or anywhere
// else must not drive it.
func (s *Server) checkDesktopOrigin(r *http.Request, h origins.Host) error {
	safe := r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions
	if safe && r.Header.Get("Upgrade") == "" {
		return nil
	}
	want := s.origins.URL(h, r.Host)
	got := r.Header.Get("Origin")
	if strings.EqualFold(got, want) {
		return nil
	}
	if got == "" {
		got = "none"
	}
	return fmt.Errorf("%s %s on %s: Origin %s is not this desktop's (%s): %w", r.Method, r.URL.Path, h.Label(), errdefs.Clip(got, 100), want, errdefs.ErrPermissionDenied)
}

// desktopAPI runs API route rt's handler h for the desktop's owner, on its own sandbox.
func (s *Server) desktopAPI(rt Route, h apiHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := r.Context().Value(desktopKey{}).(desktopRequest)
		if id := r.PathValue("id"); strings.Contains(rt.Pattern, "{id}") && id != d.host.ID {
			api.WriteErrorCode(w, http.StatusNotFound, api.CodeNotFound,
				fmt.Sprintf("sandbox %s: %s serves its own sandbox's API only", errdefs.Clip(id, 64), d.host.Label()))
			return
		}
		if err := s.checkScope(r, d.who, routeScope(rt), rt.Method+" "+rt.Pattern); err != nil {
			api.WriteError(w, s.log, err)
			return
		}
		// Admin or not, the desktop acts as its owner on their own sandbox.
		fc := fleet.Caller{UserID: d.who.User.ID, Username: d.who.User.Username}
		r = r.WithContext(withWebCaller(r.Context(), d.who))
		if err := h(w, r, fc); err != nil && !errors.Is(err, errResponded) {
			api.WriteError(w, s.log, err)
		}
	})
}

// desktopPreview sends the desktop's preview frame to the sandbox's app host with a
// handoff code for the same user and session: a frame's request is no navigation, so it
// could not sign in on its own, and the control plane's cookie is not sent to it.
func (s *Server) desktopPreview(w http.ResponseWriter, r *http.Request) {
	d := r.Context().Value(desktopKey{}).(desktopRequest)
	w.Header().Set("Cache-Control", "no-store")
	if d.who.Session == nil {
		api.WriteError(w, s.log, fmt.Errorf("the preview needs a browser session, not an API token: %w", errdefs.ErrPermissionDenied))
		return
	}
	app := origins.Host{Kind: origins.KindApp, ID: d.host.ID}
	base := s.origins.URL(app, r.Host)
	code, err := s.handoffs.Mint(origins.Grant{Host: strings.TrimPrefix(strings.TrimPrefix(base, "https://"), "http://"), UserID: d.who.User.ID, Session: d.who.Session.ID})
	if err != nil {
		api.WriteError(w, s.log, err)
		return
	}
	http.Redirect(w, r, base+"/?"+origins.HandoffParam+"="+code, http.StatusSeeOther)
}

// desktopAssetTimeout bounds one asset fetch from the agent.
const desktopAssetTimeout = 30 * time.Second

// desktopAsset serves the desktop's page and assets from the agent's listener in the
// sandbox (GET and HEAD only: it serves files). Nothing of the request but its path and
// the headers a cache and compression need reaches the agent.
func (s *Server) desktopAsset(w http.ResponseWriter, r *http.Request) {
	d := r.Context().Value(desktopKey{}).(desktopRequest)
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		api.WriteErrorCode(w, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, r.Method+" "+r.URL.Path+": the desktop's files are read with GET")
		return
	}
	sb, err := s.fleet.Handle(r.Context(), fleet.Caller{UserID: d.who.User.ID}, d.host.ID)
	if err != nil {
		api.WriteError(w, s.log, fmt.Errorf("the desktop of %s: %w", d.host.ID, err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), desktopAssetTimeout)
	defer cancel()
	tr := &http.Transport{
		DialContext:        func(ctx context.Context, _, _ string) (net.Conn, error) { return sb.DialPort(ctx, wire.DesktopPort) },
		DisableKeepAlives:  true,
		DisableCompression: true,
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, r.Method, "http://desktop"+r.URL.EscapedPath(), nil)
	if err != nil {
		api.WriteError(w, s.log, fmt.Errorf("path %q: %w", errdefs.Clip(r.URL.Path, 100), errdefs.ErrInvalidArgument))
		return
	}
	for _, k := range []string{"Accept-Encoding", "If-None-Match"} {
		if v := r.Header.Get(k); v != "" {
			req.Header.Set(k, v)
		}
	}
	res, err := tr.RoundTrip(req)
	if err != nil {
		api.WriteError(w, s.log, fmt.Errorf("the desktop of %s does not answer (its agent may be restarting; reload in a moment): %w", d.host.ID, errdefs.ErrUnavailable))
		return
	}
	defer res.Body.Close()
	h := w.Header()
	for _, k := range []string{"Content-Type", "Content-Encoding", "Content-Length", "ETag", "Cache-Control", "Vary", "Last-Modified"} {
		if v := res.Header.Get(k); v != "" {
			h.Set(k, v)
		}
	}
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", s.desktopCSP(r, d.host))
	w.WriteHeader(res.StatusCode)
	_, _ = io.Copy(w, res.Body)
}

// desktopCSP lets the desktop's page run its own script and styles, call its own origin
// (HTTP and WebSocket) and frame its sandbox's app host (through its own /desktop/preview,
// which redirects there), and nothing else.
func (s *Server) desktopCSP(r *http.Request, h origins.Host) string {
	self := s.origins.URL(h, r.Host)
	ws := "ws" + strings.TrimPrefix(self, "http")
	app := s.origins.URL(origins.Host{Kind: origins.KindApp, ID: h.ID}, r.Host)
	return "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; font-src 'self'; " +
		"connect-src 'self' " + ws + "; frame-src 'self' " + app + "; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
}

// desktopSwitch sends the browser to the desktop of the owner's other role (?role=live or
// dev), through the control plane's handoff.
func (s *Server) desktopSwitch(w http.ResponseWriter, r *http.Request) {
	d := r.Context().Value(desktopKey{}).(desktopRequest)
	to, err := s.desktopURL(r, d.who.User.ID, r.URL.Query().Get("role"))
	if err != nil {
		api.WriteError(w, s.log, err)
		return
	}
	http.Redirect(w, r, s.origins.ControlURL(r.Host)+origins.HandoffPath(to), http.StatusSeeOther)
}

// desktopURL is the desktop of the sandbox that holds userID's role now.
func (s *Server) desktopURL(r *http.Request, userID, role string) (string, error) {
	o, err := s.fleet.Owner(r.Context(), fleet.Caller{UserID: userID}, role)
	if err != nil {
		return "", err
	}
	return s.origins.URL(origins.Host{Kind: origins.KindDesktop, ID: o.Sandbox.ID}, r.Host) + "/", nil
}

// openDesktop: GET /desktop on the control plane sends a signed-in browser to the desktop
// of its role's sandbox (?role= chooses), through the handoff.
func (s *Server) openDesktop(w http.ResponseWriter, r *http.Request) {
	c, err := s.web.Identify(r)
	if err != nil {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	if !s.appGate(w, r, c, "/start") {
		return
	}
	role := r.URL.Query().Get("role")
	if role == "" {
		role = c.Role
	}
	to, err := s.desktopURL(r, c.User.ID, role)
	if err != nil {
		api.WriteError(w, s.log, err)
		return
	}
	http.Redirect(w, r, origins.HandoffPath(to), http.StatusSeeOther)
}
