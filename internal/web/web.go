package web

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/auth"
	"github.com/paddockhq/paddock/internal/store"
)

// Role cookie names. The role cookie says which of the user's two sandboxes (live
// or dev) this browser's requests are proxied to. It follows the session cookie's
// rules: over TLS it is Secure and __Host- prefixed, so that neither a sibling
// subdomain nor a plain-http response can plant it.
const (
	RoleCookie       = "paddock_role"
	SecureRoleCookie = "__Host-paddock_role"
)

// roleCookieMaxAge keeps the choice across browser restarts; it is a preference,
// not a credential, and means nothing without a session.
const roleCookieMaxAge = 90 * 24 * 60 * 60

// ReservedCookies lists every cookie name that belongs to the control plane. The
// proxy strips them from requests before they reach a sandbox (the session cookie
// is a credential the sandbox app must never see) and from sandbox responses (an
// app must not plant or overwrite them).
func ReservedCookies() []string {
	return []string{auth.CookieName, auth.InsecureCookieName, SecureRoleCookie, RoleCookie}
}

// Options configures a Web.
type Options struct {
	// Auth does the work; required. It also audits every sign-in, registration,
	// recovery and token, so Web keeps no audit trail of its own.
	Auth *auth.Service
	// Log receives internal errors (default slog.Default()). It never sees secrets.
	Log *slog.Logger
	// Home is the local path a browser goes to after signing in, registering or
	// recovering (default "/", which the server answers with the user's apps host). It must be a path on
	// this origin, so the pages can never be used to redirect elsewhere.
	Home string
	// FormTargets are CSP sources a form post may end on besides this origin, through
	// its redirects (signing in ends on the user's apps host: "*.localhost:*").
	FormTargets []string
	// Start makes and starts u's standing sandboxes (POST /auth/start, the button of
	// GET /start). Nil: those routes answer 404.
	Start func(ctx context.Context, u auth.User) error
	// Client says where a request came from, for rate limiting and the audit log.
	// Default auth.ClientFromRequest (r.RemoteAddr); behind a reverse proxy the
	// edge supplies one that believes its own proxy's forwarding header.
	Client func(*http.Request) auth.Client
	// DesktopURL is where the console's "Open desktop" link for a sandbox goes: the
	// handoff to its desktop host (an error when id names none). Nil: those links 404.
	DesktopURL func(r *http.Request, id string) (string, error)
}

// Web serves the pages and /auth/* endpoints. Create it with New.
type Web struct {
	csp    string
	auth   *auth.Service
	log    *slog.Logger
	home   string
	client func(*http.Request) auth.Client
	start  func(ctx context.Context, u auth.User) error
	// desktopURL is Options.DesktopURL.
	desktopURL func(r *http.Request, id string) (string, error)
}

// New returns a Web. It panics when o.Auth is nil or o.Home is not a local path
// ("/..." but not "//..."): both are wiring mistakes, caught at start.
func New(o Options) *Web {
	if o.Auth == nil {
		panic("web.New: Options.Auth is nil")
	}
	if o.Home == "" {
		o.Home = "/"
	}
	if !strings.HasPrefix(o.Home, "/") || strings.HasPrefix(o.Home, "//") || strings.ContainsAny(o.Home, "\\\r\n") {
		panic(fmt.Sprintf("web.New: Options.Home %q must be a path on this origin, like \"/\"", o.Home))
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Client == nil {
		o.Client = auth.ClientFromRequest
	}
	csp := "default-src 'self'; frame-ancestors 'none'; form-action " + strings.Join(append([]string{"'self'"}, o.FormTargets...), " ") + "; base-uri 'none'"
	return &Web{csp: csp, auth: o.Auth, log: o.Log, home: o.Home, client: o.Client, start: o.Start, desktopURL: o.DesktopURL}
}

// Register adds the pages and endpoints to mux. Patterns carry no method, so that
// a wrong method gets this package's 405 rather than falling through to a
// catch-all (the proxy), and all of /auth/ is claimed: an unknown /auth path is a
// 404 here, never a request to a sandbox.
func (w *Web) Register(mux *http.ServeMux) {
	get := []string{http.MethodGet, http.MethodHead}
	post := []string{http.MethodPost}
	mux.Handle("/login", w.route(get, w.loginPage))
	mux.Handle("/register", w.route(get, w.registerPage))
	mux.Handle("/recovery", w.route(get, w.recoveryPage))
	mux.Handle("/auth/assets/", w.route(get, w.assets()))
	mux.Handle("/auth/login", w.route(post, w.login))
	mux.Handle("/auth/register", w.route(post, w.register))
	mux.Handle("/auth/recovery", w.route(post, w.recover))
	mux.Handle("/auth/logout", w.route(post, w.logout))
	mux.Handle("/auth/token", w.route(post, w.token))
	mux.Handle("/auth/role", w.route(post, w.setRole))
	mux.Handle("/auth/session", w.route(get, w.session))
	if w.start != nil {
		mux.Handle("/start", w.route(get, w.startPage))
		mux.Handle("/auth/start", w.route(post, w.startSandboxes))
	}
	w.registerConsole(mux)
	mux.Handle("/auth/", w.route(nil, func(rw http.ResponseWriter, r *http.Request) {
		api.WriteErrorCode(rw, http.StatusNotFound, api.CodeNotFound, "no such /auth endpoint")
	}))
}

// route sets the security headers on every answer and refuses methods outside
// methods (nil: any) with a JSON 405.
func (w *Web) route(methods []string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		SecurityHeaders(rw.Header(), w.csp)
		if methods != nil && !contains(methods, r.Method) {
			rw.Header().Set("Allow", strings.Join(methods, ", "))
			api.WriteErrorCode(rw, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed,
				fmt.Sprintf("%s does not accept %s; use %s", r.URL.Path, r.Method, strings.Join(methods, " or ")))
			return
		}
		h(rw, r)
	})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// DefaultCSP confines a page to its own origin's assets and forms, out of every frame.
const DefaultCSP = "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"

// SecurityHeaders keeps the control plane's answers out of frames and caches and
// confines its pages to their own origin's assets: no inline script or style runs,
// even injected. csp is the Content-Security-Policy ("": DefaultCSP).
func SecurityHeaders(h http.Header, csp string) {
	if csp == "" {
		csp = DefaultCSP
	}
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
}

// Caller is who made a request: a user signed in by session cookie or by bearer
// API token.
type Caller struct {
	User auth.User
	// Session is the browser session; nil for token callers.
	Session *auth.Session
	// Token is the API token's record; nil for session callers.
	Token *store.APIToken
	// Role is the sandbox role the caller's requests go to: api.RoleLive (the
	// default) or api.RoleDev, from the role cookie.
	Role string
}

// Identify returns the caller of r. A bearer token, when the request has an
// Authorization header, wins over the cookie, and a bad one is not rescued by a
// cookie: a client that sends a token means it. No valid token or session is an
// error wrapping errdefs.ErrUnauthenticated.
func (w *Web) Identify(r *http.Request) (*Caller, error) {
	c := &Caller{Role: w.roleOf(r)}
	if r.Header.Get("Authorization") != "" {
		u, tok, err := w.auth.TokenFromRequest(r.Context(), r)
		if err != nil {
			return nil, err
		}
		c.User, c.Token = u, &tok
		return c, nil
	}
	sess, err := w.auth.SessionFromRequest(r.Context(), r)
	if err != nil {
		return nil, err
	}
	c.User, c.Session = sess.User, sess
	return c, nil
}

// CheckCSRF lets a state-changing request by c proceed: one authenticated by the
// session cookie (an ambient credential a foreign page can make the browser send)
// must pass auth's CSRF token and Origin checks; a bearer-token request carries
// nothing ambient and is exempt. The caller must have capped r's body.
func (w *Web) CheckCSRF(r *http.Request, c *Caller) error {
	if c == nil || c.Session == nil {
		return nil
	}
	return w.auth.CheckCSRF(r, c.Session)
}

func (w *Web) roleCookieName(r *http.Request) string {
	if w.auth.SecureCookies(r) {
		return SecureRoleCookie
	}
	return RoleCookie
}

// roleOf reads the role cookie; anything but "dev" is live, the safe default.
func (w *Web) roleOf(r *http.Request) string {
	if c, err := r.Cookie(w.roleCookieName(r)); err == nil && c.Value == api.RoleDev {
		return api.RoleDev
	}
	return api.RoleLive
}

// roleCookie sets role; a negative maxAge deletes the cookie.
func (w *Web) roleCookie(r *http.Request, role string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: w.roleCookieName(r), Value: role, Path: "/", MaxAge: maxAge,
		Secure: w.auth.SecureCookies(r), HttpOnly: true, SameSite: http.SameSiteLaxMode,
	}
}

func apiUser(u auth.User) api.User { return api.User{ID: u.ID, Username: u.Username, Role: u.Role} }
