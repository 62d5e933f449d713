package server

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/auth"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/origins"
	"github.com/paddockhq/paddock/internal/proxy"
	"github.com/paddockhq/paddock/internal/web"
)

// byHost sends each request to what its Host names: an apps host's sandbox, nothing for
// the apps domain itself, and the control plane for every other host.
func (s *Server) byHost(control http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		where, h, err := s.origins.Lookup(r.Host)
		switch where {
		case origins.Apps:
			s.serveAppsHost(w, r, h)
		case origins.AppsParent:
			s.appsParent(w, r, err)
		default:
			// Nothing of the control plane's may be framed (clickjacking); its pages set
			// their full policy over this.
			w.Header().Set("X-Frame-Options", "DENY")
			w.Header().Set("Content-Security-Policy", "frame-ancestors 'none'")
			control.ServeHTTP(w, r)
		}
	})
}

// appsParent answers a host under the apps domain that is no apps host: the domain
// itself (a browser's GET goes to the control plane) or an unknown name.
func (s *Server) appsParent(w http.ResponseWriter, r *http.Request, err error) {
	if err == nil && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		http.Redirect(w, r, s.origins.ControlURL(r.Host)+r.URL.RequestURI(), http.StatusFound)
		return
	}
	if err == nil {
		err = fmt.Errorf("%s is the apps domain, not the control plane: use %s: %w", s.origins.AppsDomain(), s.origins.ControlURL(r.Host), errdefs.ErrNotFound)
	}
	api.WriteError(w, s.log, err)
}

// serveAppsHost serves one apps host: the handoff's code exchange, then, for a caller
// with this host's cookie or an API token, the sandbox the host names.
func (s *Server) serveAppsHost(w http.ResponseWriter, r *http.Request, h origins.Host) {
	if _, ok := r.URL.Query()[origins.HandoffParam]; ok {
		s.exchange(w, r, h)
		return
	}
	if hp := hopOf(r); hp != nil && hp.user != "" && h.Kind != origins.KindDesktop {
		// Another replica authenticated the caller and sent the request here, where its
		// sandbox runs.
		c, err := s.appsCaller(r.Context(), hp.user, h)
		if err != nil {
			api.WriteError(w, s.log, err)
			return
		}
		s.proxy.Serve(w, r, c)
		return
	}
	who, err := s.appsUser(r)
	if err != nil {
		if isNavigation(r) {
			to := s.origins.ControlURL(r.Host) + origins.HandoffPath(s.selfURL(r, r.URL.RawQuery))
			http.Redirect(w, r, to, http.StatusSeeOther)
			return
		}
		if h.Kind == origins.KindApp && r.Method == http.MethodGet && r.Header.Get("Sec-Fetch-Dest") == "iframe" {
			s.frameSignIn(w, r, h)
			return
		}
		api.WriteError(w, s.log, fmt.Errorf("%w; open this host in a browser signed in to paddock, or send an API token", err))
		return
	}
	if !s.appGate(w, r, who, s.origins.ControlURL(r.Host)+"/start") {
		return
	}
	c, err := s.appsCaller(r.Context(), who.User.ID, h)
	if err != nil {
		api.WriteError(w, s.log, err)
		return
	}
	if h.Kind == origins.KindDesktop {
		// The desktop's own API is its sandbox's: served by the replica that runs it, which
		// authenticates the request again (the apps hosts' cookies are shared).
		if s.handOnIfElsewhere(w, r, h.ID, "") {
			return
		}
		s.serveDesktop(w, r, h, who)
		return
	}
	if s.cluster != nil {
		id, err := s.sandboxOfCaller(r.Context(), c)
		if err != nil {
			api.WriteError(w, s.log, err)
			return
		}
		if s.handOnIfElsewhere(w, r, id, who.User.ID) {
			return
		}
	}
	s.proxy.Serve(w, r, c)
}

// frameSignInMessage is what an app host's frame without a cookie posts to its
// sandbox's desktop (web/desktop/src/preview.js), which then loads the frame through the
// handoff.
const frameSignInMessage = "paddock:preview-signin"

// frameSignIn answers a frame's load of an app host it has no cookie for: a 401 page that
// tells the sandbox's desktop, and only it, to sign the frame in through its handoff. It
// mints nothing and redirects nowhere; any other framing site gets no page at all.
func (s *Server) frameSignIn(w http.ResponseWriter, r *http.Request, h origins.Host) {
	desk := s.origins.URL(origins.Host{Kind: origins.KindDesktop, ID: h.ID}, r.Host)
	script := fmt.Sprintf("parent.postMessage(%q, %q);", frameSignInMessage, desk)
	sum := sha256.Sum256([]byte(script))
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'; frame-ancestors "+desk)
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = fmt.Fprintf(w, "<!doctype html><title>Not signed in</title><p>Not signed in on this host: reload the preview.</p><script>%s</script>\n", script)
}

// appsUser is who a request to an apps host comes from: an API token (programmatic
// clients), else a cookie this host was handed off, while its session lasts. The control
// plane's session cookie counts for nothing here.
func (s *Server) appsUser(r *http.Request) (*web.Caller, error) {
	if r.Header.Get("Authorization") != "" {
		u, tok, err := s.auth.TokenFromRequest(r.Context(), r)
		if err != nil {
			return nil, err
		}
		return &web.Caller{User: u, Token: &tok}, nil
	}
	g, value, ok := s.handoffs.Cookie(origins.Values(r, s.appCookieName(r)), r.Host)
	if !ok {
		return nil, fmt.Errorf("not signed in on %s: %w", strings.ToLower(r.Host), errdefs.ErrUnauthenticated)
	}
	sess, err := s.auth.Session(r.Context(), g.Session)
	if err != nil || sess.User.ID != g.UserID {
		s.handoffs.Revoke(value)
		return nil, fmt.Errorf("the session that signed in on %s ended: %w", strings.ToLower(r.Host), errdefs.ErrUnauthenticated)
	}
	return &web.Caller{User: sess.User, Session: sess}, nil
}

// appsCaller checks that userID may reach h and says where the proxy sends the request:
// a role entry point to whichever sandbox owns the role now, an app host to its sandbox.
// Another user's host is "not found", as a missing one.
func (s *Server) appsCaller(ctx context.Context, userID string, h origins.Host) (proxy.Caller, error) {
	switch h.Kind {
	case origins.KindLive, origins.KindDev:
		if h.ID == userID {
			return proxy.Caller{UserID: userID, Role: string(h.Kind)}, nil
		}
	case origins.KindApp:
		if _, err := s.fleet.Get(ctx, fleet.Caller{UserID: userID}, h.ID); err == nil {
			return proxy.Caller{UserID: userID, SandboxID: h.ID}, nil
		} else if !errors.Is(err, errdefs.ErrNotFound) {
			return proxy.Caller{}, err
		}
	case origins.KindDesktop:
		// The desktop is its owner's alone, as the app host is; what it serves is the
		// agent's, never the app's (desktop.go).
		if _, err := s.fleet.Get(ctx, fleet.Caller{UserID: userID}, h.ID); err == nil {
			return proxy.Caller{UserID: userID, SandboxID: h.ID}, nil
		} else if !errors.Is(err, errdefs.ErrNotFound) {
			return proxy.Caller{}, err
		}
	}
	return proxy.Caller{}, fmt.Errorf("no apps host %s of yours: %w", h.Label(), errdefs.ErrNotFound)
}

// sandboxOfCaller is the sandbox a proxied request goes to now: the one named, or the
// one that owns the role (none yet: "", the proxy makes it).
func (s *Server) sandboxOfCaller(ctx context.Context, c proxy.Caller) (string, error) {
	if c.SandboxID != "" {
		return c.SandboxID, nil
	}
	roles, err := s.fleet.RolesOf(ctx, c.UserID)
	if err != nil {
		return "", err
	}
	if c.Role == api.RoleDev {
		return roles.DevID, nil
	}
	return roles.LiveID, nil
}

// isNavigation reports a browser's top-level GET of a page, the one request a handoff
// redirect helps; anything else without a cookie gets a 401, so nothing loops.
func isNavigation(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	if r.Header.Get("Upgrade") != "" {
		return false
	}
	if mode := r.Header.Get("Sec-Fetch-Mode"); mode != "" {
		dest := r.Header.Get("Sec-Fetch-Dest")
		return mode == "navigate" && (dest == "" || dest == "document")
	}
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

func (s *Server) appCookieName(r *http.Request) string {
	if s.auth.SecureCookies(r) {
		return origins.SecureCookieName
	}
	return origins.CookieName
}

// selfURL is r's absolute URL on its apps host, with rawQuery for its query.
func (s *Server) selfURL(r *http.Request, rawQuery string) string {
	u := url.URL{Scheme: s.origins.Scheme(), Host: strings.ToLower(r.Host), Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: rawQuery}
	if u.Path == "" {
		u.Path = "/"
	}
	return u.String()
}

// exchange trades a handoff code for this host's cookie and sends the browser on to the
// same URL without the code. A code that is used, expired or another host's is refused
// (403, never a redirect back to the control plane: no loop).
func (s *Server) exchange(w http.ResponseWriter, r *http.Request, h origins.Host) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		api.WriteError(w, s.log, fmt.Errorf("%s is exchanged on GET only: %w", origins.HandoffParam, errdefs.ErrInvalidArgument))
		return
	}
	code, rest := splitHandoff(r.URL.RawQuery)
	clean := s.selfURL(r, rest)
	g, err := s.handoffs.Redeem(code, r.Host)
	if err == nil {
		var sess *auth.Session
		if sess, err = s.auth.Session(r.Context(), g.Session); err == nil && sess.User.ID == g.UserID {
			_, err = s.appsCaller(r.Context(), g.UserID, h)
			if err == nil {
				g.Expires = sess.ExpiresAt
				ck := s.appCookie(r, s.handoffs.Open(g), g)
				if r.Header.Get("Sec-Fetch-Dest") == "iframe" {
					// A frame (the desktop's preview) may be a cross-site context, where a
					// Lax cookie is not sent: this one is partitioned (CHIPS), kept apart for
					// each top-level site that frames the host, and sent in no top-level
					// request (browsers take Secure on loopback names over plain http).
					ck.SameSite, ck.Secure, ck.Partitioned = http.SameSiteNoneMode, true, true
				}
				http.SetCookie(w, ck)
				http.Redirect(w, r, clean, http.StatusSeeOther)
				return
			}
		} else if err == nil {
			err = fmt.Errorf("the session changed: %w", errdefs.ErrUnauthenticated)
		}
	}
	// A reload of a URL that still carries a used code is fine when the browser is in.
	if _, ierr := s.appsUser(r); ierr == nil {
		http.Redirect(w, r, clean, http.StatusSeeOther)
		return
	}
	s.log.InfoContext(r.Context(), "handoff refused", "host", strings.ToLower(r.Host), "err", err)
	api.WriteError(w, s.log, fmt.Errorf("%w; open %s again to sign in", err, clean))
}

// appCookie carries value on this host alone: HttpOnly, no Domain, Lax, lasting as long
// as the session it came from; Secure and __Host- over TLS.
func (s *Server) appCookie(r *http.Request, value string, g origins.Grant) *http.Cookie {
	return &http.Cookie{
		Name: s.appCookieName(r), Value: value, Path: "/", Expires: g.Expires,
		Secure: s.auth.SecureCookies(r), HttpOnly: true, SameSite: http.SameSiteLaxMode,
	}
}

// splitHandoff takes the handoff code out of a raw query, keeping the rest byte for byte.
func splitHandoff(raw string) (code, rest string) {
	var kept []string
	for pair := range strings.SplitSeq(raw, "&") {
		k, v, _ := strings.Cut(pair, "=")
		if uk, err := url.QueryUnescape(k); err == nil && uk == origins.HandoffParam {
			if code == "" {
				code, _ = url.QueryUnescape(v)
			}
			continue
		}
		if pair != "" {
			kept = append(kept, pair)
		}
	}
	return code, strings.Join(kept, "&")
}

// handoff: GET /auth/handoff?to=URL on the control plane. A browser signed in here (its
// session cookie is sent on a top-level navigation) is sent on to URL, an apps host it
// may reach, with a single-use code for that host. Anything else is refused: a URL that
// is no apps host (no open redirect), another user's host.
func (s *Server) handoff(w http.ResponseWriter, r *http.Request) {
	web.SecurityHeaders(w.Header(), "")
	w.Header().Set("Referrer-Policy", "no-referrer")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		api.WriteErrorCode(w, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, r.Method+" /auth/handoff: use GET")
		return
	}
	h, to, err := s.origins.Target(r.URL.Query().Get("to"), r.Host)
	if err != nil {
		api.WriteError(w, s.log, err)
		return
	}
	sess, err := s.auth.SessionFromRequest(r.Context(), r)
	if err != nil {
		if isNavigation(r) {
			// Signing in lands on /, which picks the handoff up again from this cookie.
			http.SetCookie(w, s.nextCookie(r, base64.RawURLEncoding.EncodeToString([]byte(to.String())), nextMaxAge))
			http.Redirect(w, r, "/login", http.StatusSeeOther)
			return
		}
		api.WriteError(w, s.log, err)
		return
	}
	if _, err := s.appsCaller(r.Context(), sess.User.ID, h); err != nil {
		s.event(r.Context(), sess.User.ID, "origins.handoff_refused", map[string]any{"host": to.Hostname()})
		api.WriteError(w, s.log, err)
		return
	}
	code, err := s.handoffs.Mint(origins.Grant{Host: to.Host, UserID: sess.User.ID, Session: sess.ID})
	if err != nil {
		api.WriteError(w, s.log, err)
		return
	}
	_, rest := splitHandoff(to.RawQuery)
	to.RawQuery = strings.TrimPrefix(rest+"&"+origins.HandoffParam+"="+url.QueryEscape(code), "&")
	http.Redirect(w, r, to.String(), http.StatusSeeOther)
}

// entryURL is the base URL of a user's role entry point, for an answer to r.
func (s *Server) entryURL(r *http.Request, userID, role string) string {
	return s.origins.URL(origins.Host{Kind: origins.Kind(role), ID: userID}, r.Host)
}

// app answers every other path of the control plane's host. The control plane serves no
// app: a signed-in browser's GET of / goes to the desktop of its role's sandbox (through
// the handoff), which links the app and previews it; a GET of any other path goes to the
// same path on the role's entry point, so that links to the app's pages keep working;
// anything else is 404 naming where the app is.
func (s *Server) app(w http.ResponseWriter, r *http.Request) {
	c, err := s.web.Identify(r)
	if err != nil {
		if r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") {
			http.Redirect(w, r, "/login", http.StatusSeeOther)
			return
		}
		api.WriteError(w, s.log, err)
		return
	}
	if r.URL.Path == "/" && c.Session != nil {
		if to, ok := s.pendingHandoff(w, r); ok {
			http.Redirect(w, r, origins.HandoffPath(to), http.StatusSeeOther)
			return
		}
	}
	entry := s.entryURL(r, c.User.ID, c.Role)
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		if !s.appGate(w, r, c, "/start") {
			return
		}
		if r.URL.Path == "/" && c.Session != nil {
			to, err := s.desktopURL(r, c.User.ID, c.Role)
			if err != nil {
				api.WriteError(w, s.log, err)
				return
			}
			http.Redirect(w, r, origins.HandoffPath(to), http.StatusSeeOther)
			return
		}
		http.Redirect(w, r, entry+r.URL.RequestURI(), http.StatusSeeOther)
		return
	}
	api.WriteErrorCode(w, http.StatusNotFound, api.CodeNotFound,
		fmt.Sprintf("%s %s: the control plane serves no app; your %s app is at %s", r.Method, r.URL.Path, c.Role, entry))
}

// The cookie that carries a handoff across signing in: the apps host a signed-out browser
// asked for, base64url, for nextMaxAge seconds, on the control plane's host only.
const (
	nextCookieName       = "paddock_next"
	secureNextCookieName = "__Host-paddock_next"
	nextMaxAge           = 10 * 60
)

func (s *Server) nextCookie(r *http.Request, value string, maxAge int) *http.Cookie {
	name := nextCookieName
	if s.auth.SecureCookies(r) {
		name = secureNextCookieName
	}
	return &http.Cookie{Name: name, Value: value, Path: "/", MaxAge: maxAge,
		Secure: s.auth.SecureCookies(r), HttpOnly: true, SameSite: http.SameSiteLaxMode}
}

// pendingHandoff reads and clears the apps host a browser asked for before signing in; it
// is checked again as a handoff target (and by the handoff, as this user's).
func (s *Server) pendingHandoff(w http.ResponseWriter, r *http.Request) (string, bool) {
	c, err := r.Cookie(s.nextCookie(r, "", 0).Name)
	if err != nil {
		return "", false
	}
	http.SetCookie(w, s.nextCookie(r, "", -1))
	raw, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil {
		return "", false
	}
	if _, _, err := s.origins.Target(string(raw), r.Host); err != nil {
		return "", false
	}
	return string(raw), true
}
