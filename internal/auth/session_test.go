package auth

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestSessionCookie(t *testing.T) {
	e := newEnv(t)
	e.register(t, "alice")
	sess := e.login(t, "alice")
	plain := httptest.NewRequest("GET", "http://127.0.0.1:8080/", nil)
	tlsReq := httptest.NewRequest("GET", "https://paddock.example/", nil)
	tlsReq.TLS = &tls.ConnectionState{}
	for _, tc := range []struct {
		name       string
		svc        *Service
		r          *http.Request
		wantName   string
		wantSecure bool
	}{
		{"plain http (loopback)", e.svc, plain, InsecureCookieName, false},
		{"tls", e.svc, tlsReq, CookieName, true},
		{"behind a TLS proxy", New(e.st, WithClock(e.clk.now), WithSecureCookies()), plain, CookieName, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.svc.SessionCookie(tc.r, sess)
			if c.Name != tc.wantName || c.Secure != tc.wantSecure || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode ||
				c.Path != "/" || c.Domain != "" || c.Value != sess.ID.Reveal() {
				t.Errorf("cookie = %+v", c)
			}
			if want := int((7 * 24 * time.Hour).Seconds()); c.MaxAge != want {
				t.Errorf("MaxAge = %d, want %d", c.MaxAge, want)
			}
			if err := c.Valid(); err != nil {
				t.Errorf("invalid cookie: %v", err)
			}
			// Round trip: the browser sends it back and the session is found.
			r := tc.r.Clone(context.Background())
			r.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
			got, err := tc.svc.SessionFromRequest(context.Background(), r)
			if err != nil || got.User.Username != "alice" {
				t.Errorf("SessionFromRequest = %+v, %v", got, err)
			}
			clear := tc.svc.ClearSessionCookie(tc.r)
			if clear.Name != tc.wantName || clear.MaxAge >= 0 || clear.Value != "" {
				t.Errorf("clear cookie = %+v", clear)
			}
		})
	}
	// Over TLS, a cookie without the __Host- prefix (settable over plain http or by
	// a sibling domain) does not count.
	r := tlsReq.Clone(context.Background())
	r.AddCookie(&http.Cookie{Name: InsecureCookieName, Value: sess.ID.Reveal()})
	if _, err := e.svc.SessionFromRequest(context.Background(), r); err != ErrUnauthenticated {
		t.Errorf("unprefixed cookie over TLS: %v, want ErrUnauthenticated", err)
	}
}

func TestSessionLookup(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		setup func(e *env, s *Session) SessionID
		want  error
	}{
		{"valid", func(e *env, s *Session) SessionID { return s.ID }, nil},
		{"malformed", func(e *env, s *Session) SessionID { return "not-a-session" }, ErrUnauthenticated},
		{"unknown", func(e *env, s *Session) SessionID { return newSessionID() }, ErrUnauthenticated},
		{"idle too long", func(e *env, s *Session) SessionID { e.clk.advance(24 * time.Hour); return s.ID }, ErrUnauthenticated},
		{"active within idle timeout", func(e *env, s *Session) SessionID {
			for range 3 { // 3 x 20h > 24h idle, but each lookup refreshes it
				e.clk.advance(20 * time.Hour)
				if _, err := e.svc.Session(ctx, s.ID); err != nil {
					panic(err)
				}
			}
			return s.ID
		}, nil},
		{"past absolute expiry despite activity", func(e *env, s *Session) SessionID {
			for range 9 {
				e.clk.advance(20 * time.Hour)
				_, _ = e.svc.Session(ctx, s.ID)
			}
			return s.ID
		}, ErrUnauthenticated},
		{"logged out right after use (the session is in the cache)", func(e *env, s *Session) SessionID {
			if _, err := e.svc.Session(ctx, s.ID); err != nil {
				panic(err)
			}
			if err := e.svc.Logout(ctx, s); err != nil {
				panic(err)
			}
			return s.ID
		}, ErrUnauthenticated},
		{"logged out", func(e *env, s *Session) SessionID {
			if err := e.svc.Logout(ctx, s); err != nil {
				panic(err)
			}
			return s.ID
		}, ErrUnauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.register(t, "alice")
			sess := e.login(t, "alice")
			got, err := e.svc.Session(ctx, tc.setup(e, sess))
			if !errors.Is(err, tc.want) || (err == nil && got.User.Username != "alice") {
				t.Errorf("Session = %+v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestLogoutTwiceAndCleanup(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	reg := e.register(t, "alice")
	sess := e.login(t, "alice")
	if err := e.svc.Logout(ctx, sess); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Logout(ctx, sess); err != ErrUnauthenticated {
		t.Errorf("second logout: %v", err)
	}
	e.login(t, "alice")
	_, _ = e.svc.Login(ctx, LoginRequest{Username: "alice", Password: "wrong wrong wrong", Client: home})
	e.clk.advance(25 * time.Hour)
	live := e.login(t, "alice")
	if err := e.svc.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := e.st.CountUserSessions(ctx, reg.User.ID); n != 1 {
		t.Errorf("%d sessions after cleanup, want only the live one", n)
	}
	if _, err := e.svc.Session(ctx, live.ID); err != nil {
		t.Errorf("live session removed by cleanup: %v", err)
	}
	if n, _, _ := e.st.LoginAttempts(ctx, "user:alice", time.Time{}); n != 0 {
		t.Errorf("%d stale login attempts kept", n)
	}
}

func TestCSRF(t *testing.T) {
	e := newEnv(t, WithTrustedOrigins("https://trusted.example"))
	e.register(t, "alice")
	e.register(t, "bob")
	sess, bobSess := e.login(t, "alice"), e.login(t, "bob")
	tok := CSRFToken(sess)
	if tok2 := CSRFToken(sess); tok2 == tok {
		t.Error("CSRF tokens repeat byte for byte (no masking)")
	}
	type req struct {
		method, header, form, origin, fetchSite string
	}
	for _, tc := range []struct {
		name string
		req  req
		ok   bool
	}{
		{"GET needs nothing", req{method: "GET"}, true},
		{"HEAD needs nothing", req{method: "HEAD"}, true},
		{"POST with header token", req{method: "POST", header: tok}, true},
		{"POST with another masking of the token", req{method: "POST", header: CSRFToken(sess)}, true},
		{"POST with form token", req{method: "POST", form: tok}, true},
		{"DELETE with header token", req{method: "DELETE", header: tok}, true},
		{"POST same-origin browser", req{method: "POST", header: tok, origin: "http://paddock.test", fetchSite: "same-origin"}, true},
		{"POST with matching Origin only", req{method: "POST", header: tok, origin: "http://paddock.test"}, true},
		{"POST from trusted origin", req{method: "POST", header: tok, origin: "https://trusted.example", fetchSite: "cross-site"}, true},
		{"POST without token", req{method: "POST"}, false},
		{"POST with garbage token", req{method: "POST", header: "garbage"}, false},
		{"POST with bob's token", req{method: "POST", header: CSRFToken(bobSess)}, false},
		{"POST with a truncated token", req{method: "POST", header: tok[:len(tok)-1]}, false},
		{"POST cross-site with valid token", req{method: "POST", header: tok, origin: "https://evil.example", fetchSite: "cross-site"}, false},
		{"POST same-site (sibling) with valid token", req{method: "POST", header: tok, origin: "http://a.paddock.test", fetchSite: "same-site"}, false},
		{"POST foreign Origin, no Sec-Fetch-Site", req{method: "POST", header: tok, origin: "https://evil.example"}, false},
		{"POST Origin null", req{method: "POST", header: tok, origin: "null"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body *strings.Reader
			if tc.req.form != "" {
				body = strings.NewReader(CSRFFormField + "=" + tc.req.form)
			} else {
				body = strings.NewReader("")
			}
			r := httptest.NewRequest(tc.req.method, "http://paddock.test/api/x", body)
			if tc.req.form != "" {
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
			if tc.req.header != "" {
				r.Header.Set(CSRFHeader, tc.req.header)
			}
			if tc.req.origin != "" {
				r.Header.Set("Origin", tc.req.origin)
			}
			if tc.req.fetchSite != "" {
				r.Header.Set("Sec-Fetch-Site", tc.req.fetchSite)
			}
			err := e.svc.CheckCSRF(r, sess)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrCSRF)) {
				t.Errorf("CheckCSRF = %v, want ok=%v", err, tc.ok)
			}
		})
	}
	// The token travels only in the body or a header, never the URL.
	r := httptest.NewRequest("POST", "http://paddock.test/x?"+CSRFFormField+"="+tok, nil)
	if err := e.svc.CheckCSRF(r, sess); err == nil {
		t.Error("CSRF token accepted from the query string")
	}
	// CheckOrigin alone guards pre-session forms (login CSRF).
	r = httptest.NewRequest("POST", "http://paddock.test/auth/login", nil)
	r.Header.Set("Sec-Fetch-Site", "cross-site")
	if err := e.svc.CheckOrigin(r); !errors.Is(err, ErrCSRF) {
		t.Errorf("cross-site login post: %v", err)
	}
}

func TestAPITokens(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	alice, bob := e.register(t, "alice"), e.register(t, "bob")
	tok, info, err := e.svc.CreateAPIToken(ctx, alice.User, TokenSpec{Name: "  laptop CLI "})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok.Reveal(), "pdk_") || len(tok.Reveal()) != 47 || info.Name != "laptop CLI" || info.Prefix != tok.Reveal()[:12] {
		t.Errorf("token %d chars, info %+v", len(tok.Reveal()), info)
	}
	bearer := func(h string) *http.Request {
		r := httptest.NewRequest("GET", "http://paddock.test/api/v1/sandboxes", nil)
		if h != "" {
			r.Header.Set("Authorization", h)
		}
		return r
	}
	other, _, _ := e.svc.CreateAPIToken(ctx, bob.User, TokenSpec{Name: "bob"})
	for _, tc := range []struct {
		name, header, wantUser string
	}{
		{"valid", "Bearer " + tok.Reveal(), "alice"},
		{"scheme in lower case", "bearer " + tok.Reveal(), "alice"},
		{"bob's token is bob", "Bearer " + other.Reveal(), "bob"},
		{"no header", "", ""},
		{"basic auth", "Basic YWxpY2U6cGFzc3dvcmQ=", ""},
		{"not a token", "Bearer hello", ""},
		{"unknown token", "Bearer pdk_" + strings.Repeat("A", 43), ""},
		{"truncated", "Bearer " + tok.Reveal()[:46], ""},
		{"wrong prefix", "Bearer xyz_" + tok.Reveal()[4:], ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, _, err := e.svc.TokenFromRequest(ctx, bearer(tc.header))
			if tc.wantUser == "" {
				if !errors.Is(err, ErrUnauthenticated) {
					t.Errorf("err = %v, want ErrUnauthenticated", err)
				}
				return
			}
			if err != nil || u.Username != tc.wantUser {
				t.Errorf("TokenFromRequest = %+v, %v", u, err)
			}
		})
	}
	list, _ := e.svc.ListAPITokens(ctx, alice.User.ID)
	if len(list) != 1 || !list[0].LastUsedAt.Equal(e.clk.now()) {
		t.Errorf("last_used_at not recorded: %+v", list)
	}
	if err := e.svc.RevokeAPIToken(ctx, bob.User.ID, info.ID); !errors.Is(err, errNotFound) {
		t.Errorf("bob revoking alice's token: %v, want not found", err)
	}
	if err := e.svc.RevokeAPIToken(ctx, alice.User.ID, info.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.svc.AuthenticateToken(ctx, tok); err != ErrUnauthenticated {
		t.Errorf("revoked token: %v, want ErrUnauthenticated", err)
	}
	if _, _, err := e.svc.AuthenticateToken(ctx, other); err != nil {
		t.Errorf("bob's token broken by revoking alice's: %v", err)
	}
	for _, name := range []string{"", strings.Repeat("n", 65), "tab\there"} {
		if _, _, err := e.svc.CreateAPIToken(ctx, alice.User, TokenSpec{Name: name}); !errors.Is(err, errInvalid) {
			t.Errorf("token name %q: %v", name, err)
		}
	}
	if _, _, err := e.svc.CreateAPIToken(ctx, User{ID: "no-such-user"}, TokenSpec{Name: "x"}); !errors.Is(err, errNotFound) {
		t.Errorf("token for a missing user: %v", err)
	}
}

func TestClientFromRequest(t *testing.T) {
	for remote, want := range map[string]string{
		"192.0.2.1:4242":          "ip:192.0.2.1",
		"[::ffff:192.0.2.1]:4242": "ip:192.0.2.1",
		"[2001:db8::1]:4242":      "ip:2001:db8::/64",
		"[fe80::1%eth0]:4242":     "ip:fe80::/64",
		"192.0.2.9":               "ip:192.0.2.9",
		"@":                       "ip:unknown",
	} {
		r := httptest.NewRequest("POST", "/auth/login", nil)
		r.RemoteAddr = remote
		r.Header.Set("X-Forwarded-For", "203.0.113.5")
		r.Header.Set("User-Agent", strings.Repeat("u", 1000))
		c := ClientFromRequest(r)
		keys := (&Service{cfg: config{addressLimit: 20}}).limitKeys("", c)
		if len(keys) != 1 || keys[0].key != want || len(c.UserAgent) != 256 {
			t.Errorf("%s: keys %v, UA %d bytes; want %s", remote, keys, len(c.UserAgent), want)
		}
	}
}
