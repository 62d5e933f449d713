package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/origins"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/testenv"
)

// stepper follows no redirect, so a test sees each hop of the handoff.
type stepper struct {
	t  *testing.T
	hc *http.Client
}

func newStepper(t *testing.T, jar http.CookieJar) *stepper {
	if jar == nil {
		jar, _ = cookiejar.New(nil)
	}
	return &stepper{t: t, hc: &http.Client{
		Jar: jar, Transport: servertest.Transport(), Timeout: 2 * time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// get GETs u as a browser's navigation (Accept: text/html) unless plain.
func (s *stepper) get(u string, navigate bool) *http.Response {
	s.t.Helper()
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	if navigate {
		req.Header.Set("Accept", "text/html")
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		s.t.Fatalf("GET %s: %v", u, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// expect checks a hop's status and, for a redirect, returns where it goes.
func (s *stepper) expect(resp *http.Response, status int) string {
	s.t.Helper()
	if resp.StatusCode != status {
		s.t.Fatalf("GET %s: %s, want %d (Location %q)", resp.Request.URL, resp.Status, status, resp.Header.Get("Location"))
	}
	loc, err := resp.Location()
	if err != nil {
		return ""
	}
	return loc.String()
}

// handoffCode walks an apps host's navigation to the control plane and back, and returns
// the URL carrying the code (not yet followed).
func (s *stepper) handoffCode(target string) string {
	s.t.Helper()
	toControl := s.expect(s.get(target, true), http.StatusSeeOther)
	if !strings.Contains(toControl, "/auth/handoff?to=") {
		s.t.Fatalf("%s sent the browser to %s, want the control plane's handoff", target, toControl)
	}
	back := s.expect(s.get(toControl, true), http.StatusSeeOther)
	if !strings.Contains(back, origins.HandoffParam+"=") {
		s.t.Fatalf("the handoff sent the browser to %s, want %s with a code", back, target)
	}
	return back
}

// sessionJar is a cookie jar holding c's control-plane session only.
func sessionJar(t *testing.T, c *servertest.Client) http.CookieJar {
	jar, _ := cookiejar.New(nil)
	u, _ := url.Parse(c.Base)
	jar.SetCookies(u, c.HTTP.Jar.Cookies(u))
	return jar
}

func appCookies(jar http.CookieJar, u string) []*http.Cookie {
	pu, _ := url.Parse(u)
	var out []*http.Cookie
	for _, c := range jar.Cookies(pu) {
		if c.Name == origins.CookieName {
			out = append(out, c)
		}
	}
	return out
}

// A browser reaches an apps host through the handoff: the apps host sends it to the
// control plane, which sends it back with a single-use code, which the apps host trades
// for an HttpOnly cookie of its own and a redirect that drops the code. The code works
// once, on its own host, for 60 s.
func TestHandoff(t *testing.T) {
	testenv.RequireRoot(t)
	clk := &testClock{t: time.Now()}
	e := servertest.StartOpts(t, server.Config{Runner: testenv.Config(t), Listen: "127.0.0.1:0"},
		server.Options{AuthOptions: servertest.CheapAuth(), HandoffClock: clk.now})
	alice := e.Register(t, "alice")
	alice.Start()
	live := alice.AppURL("live")
	s := newStepper(t, sessionJar(t, alice))

	withCode := s.handoffCode(live + "/api/info?x=1")
	resp := s.get(withCode, true)
	clean := s.expect(resp, http.StatusSeeOther)
	if clean != live+"/api/info?x=1" {
		t.Errorf("after the exchange the browser goes to %s, want %s/api/info?x=1 (no code)", clean, live)
	}
	var set *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == origins.CookieName {
			set = c
		}
	}
	if set == nil || !set.HttpOnly || set.Domain != "" || set.Path != "/" || set.SameSite != http.SameSiteLaxMode {
		t.Fatalf("the apps host's cookie: %+v; want HttpOnly, host-only, Path=/, Lax", set)
	}
	for _, c := range alice.HTTP.Jar.Cookies(mustURL(t, alice.Base)) {
		if c.Value == set.Value {
			t.Fatal("the apps host's cookie is the control plane's session")
		}
	}
	resp = s.get(clean, false)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(api.HeaderRole) != "live" {
		t.Fatalf("with the cookie: %s, role %q", resp.Status, resp.Header.Get(api.HeaderRole))
	}

	t.Run("single use", func(t *testing.T) {
		fresh := newStepper(t, nil)
		fresh.expect(fresh.get(withCode, true), http.StatusForbidden)
	})
	t.Run("wrong host", func(t *testing.T) {
		code := newStepper(t, sessionJar(t, alice)).handoffCode(live + "/")
		u := mustURL(t, code)
		dev := mustURL(t, alice.AppURL("dev"))
		u.Host = dev.Host
		fresh := newStepper(t, nil)
		fresh.expect(fresh.get(u.String(), true), http.StatusForbidden)
		// Tried on the wrong host, the code is used up.
		fresh.expect(fresh.get(code, true), http.StatusForbidden)
	})
	t.Run("expiry", func(t *testing.T) {
		code := newStepper(t, sessionJar(t, alice)).handoffCode(alice.AppURL("dev") + "/")
		clk.add(origins.CodeTTL + time.Second)
		fresh := newStepper(t, nil)
		fresh.expect(fresh.get(code, true), http.StatusForbidden)
	})
	t.Run("no redirect loop", func(t *testing.T) {
		fresh := newStepper(t, nil)
		fresh.expect(fresh.get(live+"/api/info", false), http.StatusUnauthorized) // a fetch, not a navigation
		req, _ := http.NewRequest("POST", live+"/api/info", strings.NewReader("{}"))
		req.Header.Set("Accept", "text/html")
		resp, err := fresh.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		fresh.expect(resp, http.StatusUnauthorized)
		// Signed out on the control plane, the handoff sends the browser to sign in, and
		// signing in (which lands on /) takes it on to the host it asked for.
		asked := alice.AppURL("dev") + "/api/info?q=1"
		toControl := fresh.expect(fresh.get(asked, true), http.StatusSeeOther)
		if got := fresh.expect(fresh.get(toControl, true), http.StatusSeeOther); !strings.HasSuffix(got, "/login") {
			t.Errorf("a signed-out handoff goes to %s, want /login", got)
		}
		body, _ := json.Marshal(api.Credentials{Username: "alice", Password: "correct horse battery alice"})
		req, _ = http.NewRequest("POST", e.URL+"/auth/login", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err = fresh.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		fresh.expect(resp, http.StatusOK)
		again := fresh.expect(fresh.get(e.URL+"/", true), http.StatusSeeOther)
		withCode := fresh.expect(fresh.get(again, true), http.StatusSeeOther)
		if got := fresh.expect(fresh.get(withCode, true), http.StatusSeeOther); got != asked {
			t.Errorf("after signing in the browser goes to %s, want %s", got, asked)
		}
		// Once: the next visit of / goes to the role's desktop, any other path to the
		// role's entry point.
		var roles api.Roles
		alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
		desk := e.AppsURL(origins.Host{Kind: origins.KindDesktop, ID: roles.Live.ID}) + "/"
		if got := fresh.expect(fresh.get(e.URL+"/", true), http.StatusSeeOther); got != e.URL+origins.HandoffPath(desk) {
			t.Errorf("the second / goes to %s, want the handoff to %s", got, desk)
		}
		if got := fresh.expect(fresh.get(e.URL+"/notes?q=1", true), http.StatusSeeOther); got != live+"/notes?q=1" {
			t.Errorf("the second /notes goes to %s, want %s/notes?q=1", got, live)
		}
	})
	t.Run("API token", func(t *testing.T) {
		resp := alice.AppToken(live, "GET", "/api/info", nil)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get(api.HeaderSandbox) == "" {
			t.Errorf("with a bearer token: %s", resp.Status)
		}
		// A sandbox's own host is named by its app status and serves that sandbox.
		var roles api.Roles
		alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
		var st api.AppStatus
		servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+roles.Dev.ID+"/app", nil), http.StatusOK, &st)
		if st.URL != alice.SandboxURL(roles.Dev.ID) {
			t.Errorf("app status URL %q, want %s", st.URL, alice.SandboxURL(roles.Dev.ID))
		}
		resp = alice.AppToken(st.URL, "GET", "/api/info", nil)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get(api.HeaderSandbox) != roles.Dev.ID || resp.Header.Get(api.HeaderRole) != "dev" {
			t.Errorf("%s: %s from %q as %q, want the dev sandbox %s", st.URL, resp.Status, resp.Header.Get(api.HeaderSandbox), resp.Header.Get(api.HeaderRole), roles.Dev.ID)
		}
		// On an apps host, /api/v1 is the sandbox's, never the control plane's.
		resp = alice.AppToken(live, "GET", "/api/v1/me/secrets", nil)
		resp.Body.Close()
		if resp.Header.Get(api.HeaderSandbox) == "" {
			t.Errorf("/api/v1/me/secrets on an apps host was answered by the control plane: %s", resp.Status)
		}
	})
}

// Only apps hosts the signed-in user may reach are handoff targets: no open redirect, no
// other user's host. The refusal is audited.
func TestHandoffRefusals(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	alice.Start()
	bob := e.Register(t, "bob")
	bob.Start()
	var aliceSbs api.SandboxList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes", nil), http.StatusOK, &aliceSbs)
	s := newStepper(t, sessionJar(t, bob))
	handoff := func(to string) *http.Response {
		return s.get(e.URL+"/auth/handoff?to="+url.QueryEscape(to), true)
	}
	port := mustURL(t, e.URL).Port()
	for _, to := range []string{
		"http://evil.example/", "//evil.example/", "http://127.0.0.1:" + port + "/", "http://localhost:" + port + "/",
		"http://live-" + bob.User.ID + ".localhost:1/", "https://live-" + bob.User.ID + ".localhost:" + port + "/",
		"http://live-" + bob.User.ID + ".localhost.evil.example:" + port + "/", "javascript:alert(1)",
	} {
		if resp := handoff(to); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("handoff to %s: %s (Location %q), want 400", to, resp.Status, resp.Header.Get("Location"))
		}
	}
	others := []string{alice.AppURL("live") + "/", alice.AppURL("dev") + "/", "http://desktop-sb-aaaaaaaaaa.localhost:" + port + "/"}
	for _, sb := range aliceSbs.Sandboxes {
		others = append(others, alice.SandboxURL(sb.ID)+"/")
	}
	for _, to := range others {
		if resp := handoff(to); resp.StatusCode != http.StatusNotFound {
			t.Errorf("bob's handoff to alice's %s: %s (Location %q), want 404", to, resp.Status, resp.Header.Get("Location"))
		}
	}
	var evs api.EventList
	servertest.Decode(t, bob.DoToken("GET", "/api/v1/events?action=origins.handoff_refused", nil), http.StatusOK, &evs)
	if len(evs.Events) < len(others) {
		t.Errorf("%d refusals audited, want %d", len(evs.Events), len(others))
	}
	// Bob's API token does not open alice's hosts either.
	for _, base := range []string{alice.AppURL("live"), alice.AppURL("dev")} {
		resp := bob.AppToken(base, "GET", "/api/info", nil)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("bob's token on %s: %s, want 404", base, resp.Status)
		}
	}
}

// A cookie is valid only on the host it was made for: one tossed from another apps host
// (Domain=<apps domain> reaches every one of them) is refused, and the host's own cookie
// is found among several of the same name.
func TestAppsCookieTossing(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	alice.Start()
	bob := e.Register(t, "bob")
	bob.Start()
	bob.Handoff(bob.AppURL("live"))
	alice.Handoff(alice.AppURL("live"))
	alice.Handoff(alice.AppURL("dev"))
	bobs := appCookies(bob.HTTP.Jar, bob.AppURL("live"))
	aliceLive := appCookies(alice.HTTP.Jar, alice.AppURL("live"))
	aliceDev := appCookies(alice.HTTP.Jar, alice.AppURL("dev"))
	if len(bobs) != 1 || len(aliceLive) != 1 || len(aliceDev) != 1 {
		t.Fatalf("cookies: bob %d, alice live %d, dev %d", len(bobs), len(aliceLive), len(aliceDev))
	}
	try := func(base string, values ...string) int {
		req, _ := http.NewRequest("GET", base+"/api/info", nil)
		for _, v := range values {
			req.Header.Add("Cookie", origins.CookieName+"="+v)
		}
		resp, err := (&http.Client{Transport: servertest.Transport()}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		name   string
		base   string
		values []string
		want   int
	}{
		{"alice's own", alice.AppURL("live"), []string{aliceLive[0].Value}, 200},
		{"bob's tossed onto alice's host", alice.AppURL("live"), []string{bobs[0].Value}, 401},
		{"alice's dev cookie on her live host", alice.AppURL("live"), []string{aliceDev[0].Value}, 401},
		{"alice's live cookie on bob's host", bob.AppURL("live"), []string{aliceLive[0].Value}, 401},
		{"a tossed cookie first, the host's own after", alice.AppURL("live"), []string{bobs[0].Value, aliceLive[0].Value}, 200},
	} {
		if got := try(tc.base, tc.values...); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// An apps host's cookie ends with the session it came from: logout and recovery end it.
func TestAppsCookieRevoked(t *testing.T) {
	e := servertest.Start(t)
	for _, end := range []string{"logout", "recovery"} {
		t.Run(end, func(t *testing.T) {
			c := e.Register(t, "user"+end)
			c.Start()
			live := c.AppURL("live")
			c.Handoff(live)
			resp := c.AppAt(live, "GET", "/api/info", nil)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("before the %s: %s", end, resp.Status)
			}
			switch end {
			case "logout":
				servertest.Decode(t, c.Do("POST", "/auth/logout", struct{}{}), http.StatusNoContent, nil)
			case "recovery":
				body, _ := json.Marshal(api.RecoverRequest{Username: c.User.Username, RecoveryCode: c.Recovery[0], NewPassword: "another long passphrase 42"})
				resp, err := http.Post(c.Base+"/auth/recovery", "application/json", bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				servertest.Decode(t, resp, http.StatusNoContent, nil)
			}
			resp = c.AppAt(live, "GET", "/api/info", nil)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("after the %s, the apps host's cookie gets %s, want 401", end, resp.Status)
			}
		})
	}
}

// The control plane's host serves no app: / sends a signed-in browser to its entry point,
// other methods are 404; nothing of it may be framed; the apps domain itself is nothing.
func TestControlPlaneServesNoApp(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	alice.Start()
	s := newStepper(t, sessionJar(t, alice))
	if got := s.expect(s.get(e.URL+"/some/page?q=1", true), http.StatusSeeOther); got != alice.AppURL("live")+"/some/page?q=1" {
		t.Errorf("GET /some/page on the control plane goes to %s, want the live entry point", got)
	}
	resp := alice.Do("POST", "/some/form", "{}")
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get(api.HeaderSandbox) != "" {
		t.Errorf("POST /some/form on the control plane: %s from %q, want 404 from the control plane", resp.Status, resp.Header.Get(api.HeaderSandbox))
	}
	for _, p := range []string{"/login", "/api/v1/me", "/auth/session", "/healthz"} {
		resp := alice.Do("GET", p, nil)
		resp.Body.Close()
		if resp.Header.Get("X-Frame-Options") != "DENY" || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
			t.Errorf("%s: X-Frame-Options %q, CSP %q", p, resp.Header.Get("X-Frame-Options"), resp.Header.Get("Content-Security-Policy"))
		}
	}
	port := mustURL(t, e.URL).Port()
	if got := s.expect(s.get("http://localhost:"+port+"/login", true), http.StatusFound); got != "http://127.0.0.1:"+port+"/login" {
		t.Errorf("the apps domain itself sends the browser to %s, want the control plane", got)
	}
	resp = alice.AppToken("http://unknown.localhost:"+port, "GET", "/", nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("an unknown apps host: %s", resp.Status)
	}
}

// With secure_cookies the apps host's cookie is __Host- prefixed and Secure, and only
// that spelling counts.
func TestAppsCookieSecure(t *testing.T) {
	e := servertest.Start(t, func(c *server.Config) { c.SecureCookies = true })
	alice := e.Register(t, "alice")
	alice.Start()
	live := alice.AppURL("live")
	s := newStepper(t, sessionJar(t, alice))
	resp := s.get(s.handoffCode(live+"/"), true)
	var set *http.Cookie
	for _, c := range resp.Cookies() {
		set = c
	}
	if set == nil || set.Name != origins.SecureCookieName || !set.Secure || !set.HttpOnly || set.Domain != "" {
		t.Fatalf("cookie %+v, want %s, Secure, HttpOnly, host-only", set, origins.SecureCookieName)
	}
	for name, want := range map[string]int{origins.SecureCookieName: 200, origins.CookieName: 401} {
		req, _ := http.NewRequest("GET", live+"/api/info", nil)
		req.AddCookie(&http.Cookie{Name: name, Value: set.Value})
		resp, err := (&http.Client{Transport: servertest.Transport()}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("cookie named %s: %s, want %d", name, resp.Status, want)
		}
	}
}

type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// The control plane's WebSocket (the exec stream) refuses a handshake from an apps
// host's page, even one that carries the user's session cookie.
func TestControlPlaneWebSocketOrigin(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	alice.Start()
	var roles api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
	stream := "ws" + strings.TrimPrefix(e.URL, "http") + "/api/v1/sandboxes/" + roles.Live.ID + "/exec/stream"
	for origin, want := range map[string]int{
		strings.TrimSuffix(alice.AppURL("live"), "/"): http.StatusForbidden,
		alice.SandboxURL(roles.Live.ID):               http.StatusForbidden,
		e.URL:                                         http.StatusSwitchingProtocols,
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		ws, resp, err := websocket.Dial(ctx, stream, &websocket.DialOptions{
			HTTPClient: alice.HTTP, HTTPHeader: http.Header{"Origin": {origin}}, Subprotocols: []string{api.StreamProtocol},
		})
		cancel()
		got := 0
		if resp != nil {
			got = resp.StatusCode
		}
		if ws != nil {
			ws.CloseNow()
		}
		if got != want {
			t.Errorf("a WebSocket from %s: %d (%v), want %d", origin, got, err, want)
		}
	}
}

// apps_domain and public_url are checked at start, the error naming the field; a server
// refuses to start on an apps domain that is its own site.
func TestAppsDomainConfig(t *testing.T) {
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "paddock.yaml")
	for body, want := range map[string]string{
		"apps_domain: apps.example.com\npublic_url: https://paddock.example.com\n": `apps_domain "apps.example.com" and the control plane's host "paddock.example.com" (public_url) are the same site`,
		"apps_domain: 10.0.0.1\n":                                                  `apps_domain: "10.0.0.1": want a DNS name`,
		"public_url: https://paddock.example.com/sub\n":                            `public_url: "https://paddock.example.com/sub"`,
		"apps_domain: example-apps.net\npublic_url: https://paddock.example.com\n": "",
	} {
		if err := os.WriteFile(cfgFile, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := server.LoadConfig(cfgFile, dir, "")
		switch {
		case want == "" && err != nil:
			t.Errorf("%q: %v", body, err)
		case want == "" && cfg.AppsDomain != "example-apps.net":
			t.Errorf("%q: apps_domain %q", body, cfg.AppsDomain)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
}
