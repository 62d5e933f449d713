package web

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/auth"
	"github.com/paddockhq/paddock/internal/store"
)

// cheap are Argon2id parameters fast enough for tests; the format is identical.
var cheap = auth.Params{Memory: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}

const (
	goodPassword = "correct horse battery staple"
	homeBody     = "APP HOME"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// env is a control plane's web surface on a real store, served over real HTTP,
// with a stub app at Home ("/app/") standing in for the proxied sandbox.
type env struct {
	srv  *httptest.Server
	st   *store.Store
	auth *auth.Service
	clk  *clock
}

const testHome = "/app/"

func newEnv(t *testing.T, tls bool, opts ...auth.Option) *env {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "paddock.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := &clock{t: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)}
	quiet := slog.New(slog.DiscardHandler)
	svc := auth.New(st, append([]auth.Option{auth.WithParams(cheap), auth.WithClock(clk.now), auth.WithLogger(quiet)}, opts...)...)
	mux := http.NewServeMux()
	New(Options{Auth: svc, Log: quiet, Home: testHome}).Register(mux)
	mux.HandleFunc("/", func(rw http.ResponseWriter, r *http.Request) { io.WriteString(rw, homeBody) })
	var srv *httptest.Server
	if tls {
		srv = httptest.NewTLSServer(mux)
	} else {
		srv = httptest.NewServer(mux)
	}
	t.Cleanup(srv.Close)
	return &env{srv: srv, st: st, auth: svc, clk: clk}
}

// client is a browser-like client: its own cookie jar, and redirects not followed,
// so that tests see the 303s.
func (e *env) client(t *testing.T) *client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := new(http.Client)
	*c = *e.srv.Client() // shared by the server: copy before giving it a jar
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &client{t: t, c: c, base: e.srv.URL}
}

type client struct {
	t    *testing.T
	c    *http.Client
	base string
}

type resp struct {
	*http.Response
	body string
}

func (c *client) do(method, path, contentType, body string, hdr ...string) *resp {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := c.c.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return &resp{Response: res, body: string(b)}
}

func (c *client) get(path string, hdr ...string) *resp {
	return c.do(http.MethodGet, path, "", "", hdr...)
}

func (c *client) json(path string, v any, hdr ...string) *resp {
	c.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.do(http.MethodPost, path, "application/json", string(b), hdr...)
}

func (c *client) form(path string, v url.Values, hdr ...string) *resp {
	c.t.Helper()
	return c.do(http.MethodPost, path, "application/x-www-form-urlencoded", v.Encode(), hdr...)
}

// cookie returns the value of the jar's cookie name, or "".
func (c *client) cookie(name string) string {
	u, _ := url.Parse(c.base)
	for _, ck := range c.c.Jar.Cookies(u) {
		if ck.Name == name {
			return ck.Value
		}
	}
	return ""
}

// csrf asks /auth/session for a CSRF token.
func (c *client) csrf() string {
	c.t.Helper()
	var s api.Session
	c.want(c.get("/auth/session"), http.StatusOK).decode(&s)
	if s.CSRFToken == "" {
		c.t.Fatal("no CSRF token in /auth/session")
	}
	return s.CSRFToken
}

// want fails the test unless r has status.
func (c *client) want(r *resp, status int) *resp {
	c.t.Helper()
	if r.StatusCode != status {
		c.t.Fatalf("%s %s: status %d, want %d; body: %.600s", r.Request.Method, r.Request.URL.Path, r.StatusCode, status, r.body)
	}
	return r
}

func (r *resp) decode(v any) {
	if err := json.NewDecoder(bytes.NewReader([]byte(r.body))).Decode(v); err != nil {
		panic("decoding " + r.body + ": " + err.Error())
	}
}

// apiError decodes the API's error shape, failing unless the body is one.
func (c *client) apiError(r *resp, status int, code string) api.ErrorBody {
	c.t.Helper()
	c.want(r, status)
	var e api.Error
	if err := json.Unmarshal([]byte(r.body), &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
		c.t.Fatalf("%s %s: not an API error: %q", r.Request.Method, r.Request.URL.Path, r.body)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		c.t.Errorf("error Content-Type %q", ct)
	}
	if code != "" && e.Error.Code != code {
		c.t.Errorf("%s %s: code %q, want %q (%s)", r.Request.Method, r.Request.URL.Path, e.Error.Code, code, e.Error.Message)
	}
	return e.Error
}

// register creates an account over JSON with c, which is then signed in.
func (c *client) register(name string) api.Registration {
	c.t.Helper()
	var reg api.Registration
	c.want(c.json("/auth/register", api.Credentials{Username: name, Password: goodPassword}), http.StatusCreated).decode(&reg)
	return reg
}
