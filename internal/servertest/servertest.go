// Package servertest starts a real control plane for tests: real SQLite, real sandboxes
// (container tier, runc), a real HTTP server on loopback. Clients talk to it with real
// HTTP and WebSocket clients.
package servertest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/auth"
	"github.com/paddockhq/paddock/internal/origins"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/testenv"
)

// Cheap Argon2 parameters: tests register many accounts.
var cheap = auth.Params{Memory: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}

// Env is a running control plane.
type Env struct {
	URL    string
	Server *server.Server
	Config server.Config
	HTTP   *httptest.Server
	// Logs holds every line the control plane logged, at debug level.
	Logs *LogBuffer
	logf func(format string, args ...any) // the test's log, for a stop that hangs
}

// LogBuffer collects log output; it is safe for concurrent use.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything logged so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Start runs a control plane on a fresh data dir. edit, when given, changes the
// configuration first. Sandboxes are destroyed when the test ends.
func Start(t testing.TB, edit ...func(*server.Config)) *Env {
	t.Helper()
	testenv.RequireRoot(t)
	cfg := server.Config{Runner: testenv.Config(t), Listen: "127.0.0.1:0"}
	for _, e := range edit {
		e(&cfg)
	}
	return StartWith(t, cfg)
}

// StartWith runs a control plane on cfg (a restart test passes the same cfg twice).
func StartWith(t testing.TB, cfg server.Config) *Env {
	t.Helper()
	return StartOpts(t, cfg, server.Options{AuthOptions: CheapAuth()})
}

// CheapAuth are auth options with cheap Argon2 parameters and no practical limit on
// registrations from one address: tests register many accounts.
func CheapAuth() []auth.Option {
	return []auth.Option{auth.WithParams(cheap), auth.WithRegistrationLimit(100_000, time.Hour)}
}

// StartOpts is StartWith with the server's options.
func StartOpts(t testing.TB, cfg server.Config, opts server.Options) *Env {
	t.Helper()
	logs := &LogBuffer{}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(testenv.LogWriter(t), logs), &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := server.New(context.Background(), cfg, log, opts)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	hs := httptest.NewServer(s.Handler())
	hs.Config.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelDebug)
	e := &Env{URL: hs.URL, Server: s, Config: cfg, HTTP: hs, Logs: logs, logf: t.Logf}
	t.Cleanup(func() { e.Stop(true) })
	return e
}

// Stop stops serving; with destroy, the sandboxes go too (otherwise they keep running,
// as after a crash, for the next server to adopt). It is idempotent.
func (e *Env) Stop(destroy bool) {
	if e.HTTP == nil {
		return
	}
	hs := e.HTTP
	e.HTTP = nil
	done := make(chan struct{})
	go func() {
		defer close(done)
		hs.CloseClientConnections()
		hs.Close()
		if destroy {
			ctx, cancel := context.WithTimeout(context.Background(), stopBound)
			defer cancel()
			e.Server.DestroySandboxes(ctx)
		}
		e.Server.Close()
	}()
	select {
	case <-done:
	case <-time.After(2 * stopBound):
		buf := make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		e.logf("servertest: the control plane has not stopped after %v; going on without it. Goroutines:\n%s", 2*stopBound, buf)
	}
}

// stopBound bounds each wait of Stop (the sandboxes' removal; the whole stop at twice
// it): a shutdown that hangs leaves its goroutines in the test's log instead of holding
// the test binary until its own timeout, which would say only that it ran out.
const stopBound = 3 * time.Minute

// AppsURL is the base URL of an apps host of this server ("http://live-<user>.localhost:<port>").
func (e *Env) AppsURL(h origins.Host) string { return AppsURL(e.URL, h) }

// AppsURL is the base URL of an apps host of the server at base.
func AppsURL(base string, h origins.Host) string {
	u, err := url.Parse(base)
	if err != nil {
		panic(err)
	}
	return "http://" + net.JoinHostPort(h.Label()+"."+origins.DefaultAppsDomain, u.Port())
}

// Transport reaches the server on its own host and on its apps hosts (names under
// localhost, which Go does not resolve, dialled on loopback as browsers do).
func Transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = origins.DialLocalhost(&net.Dialer{Timeout: 30 * time.Second})
	return t
}

// Client is a signed-in user: a browser-like client (cookie jar, CSRF token) and the
// user's API token.
type Client struct {
	t        testing.TB
	Base     string
	HTTP     *http.Client // with the session cookie
	User     api.User
	CSRF     string
	Token    string
	Recovery []string
	// handedOff holds the apps hosts' base URLs this client signed in on (shared by copies).
	handedOff *sync.Map
}

// AppURL is the base URL of the user's entry point for role (live or dev).
func (c *Client) AppURL(role string) string {
	return AppsURL(c.Base, origins.Host{Kind: origins.Kind(role), ID: c.User.ID})
}

// SandboxURL is the base URL of one sandbox's own apps host.
func (c *Client) SandboxURL(id string) string {
	return AppsURL(c.Base, origins.Host{Kind: origins.KindApp, ID: id})
}

// App sends a request to the user's live app, as their browser would: the first one to
// a host goes through the handoff.
func (c *Client) App(method, path string, body any) *http.Response {
	c.t.Helper()
	return c.AppAt(c.AppURL("live"), method, path, body)
}

// AppAt sends a request to path on the apps host at base, handed off first if the
// client has no cookie there yet.
func (c *Client) AppAt(base, method, path string, body any) *http.Response {
	c.t.Helper()
	c.Handoff(base)
	return c.doAt(base, method, path, body, func(*http.Request) {}, c.HTTP)
}

// AppToken sends a request to path on the apps host at base with the API token only.
func (c *Client) AppToken(base, method, path string, body any) *http.Response {
	c.t.Helper()
	return c.doAt(base, method, path, body, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+c.Token) },
		&http.Client{Timeout: 2 * time.Minute, Transport: Transport()})
}

// Handoff signs the client in on the apps host at base, as a browser's navigation does,
// unless it did already.
func (c *Client) Handoff(base string) {
	c.t.Helper()
	if c.handedOff == nil {
		c.handedOff = &sync.Map{}
	}
	if _, ok := c.handedOff.Load(base); ok {
		return
	}
	u, err := url.Parse(base + "/")
	if err != nil {
		c.t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", u.String(), nil)
	req.Header.Set("Accept", "text/html")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		c.t.Fatalf("handoff to %s: %v", base, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if !c.hasAppCookie(u) {
		c.t.Fatalf("handoff to %s: no cookie (the last answer: %s from %s)", base, resp.Status, resp.Request.URL)
	}
	c.handedOff.Store(base, true)
}

func (c *Client) hasAppCookie(u *url.URL) bool {
	for _, ck := range c.HTTP.Jar.Cookies(u) {
		if ck.Name == origins.CookieName {
			return true
		}
	}
	return false
}

// Register makes an account through POST /auth/register and an API token for it.
func (e *Env) Register(t testing.TB, username string) *Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &Client{t: t, Base: e.URL, HTTP: &http.Client{Jar: jar, Timeout: 2 * time.Minute, Transport: Transport()}, handedOff: &sync.Map{}}
	var reg api.Registration
	c.MustJSON("POST", "/auth/register", api.Credentials{Username: username, Password: "correct horse battery " + username}, http.StatusCreated, &reg)
	c.User, c.Recovery = reg.User, reg.RecoveryCodes
	var sess api.Session
	c.MustJSON("GET", "/auth/session", nil, http.StatusOK, &sess)
	c.CSRF = sess.CSRFToken
	var tok api.Token
	c.MustJSON("POST", "/api/v1/tokens", api.CreateTokenRequest{Name: "tests"}, http.StatusCreated, &tok)
	c.Token = tok.Secret
	return c
}

// Start asks for the account's sandboxes (POST /auth/start), as the /start page's button
// does: a signed-in browser's requests for its app wait for that.
func (c *Client) Start() {
	c.t.Helper()
	Decode(c.t, c.Do("POST", "/auth/start", nil), http.StatusNoContent, nil)
}

// Do sends a request with the session cookie (and CSRF token) and returns the response.
// body is JSON-encoded unless it is an io.Reader or nil.
func (c *Client) Do(method, path string, body any) *http.Response {
	c.t.Helper()
	return c.do(method, path, body, func(r *http.Request) {
		if c.CSRF != "" {
			r.Header.Set("X-CSRF-Token", c.CSRF)
		}
	}, c.HTTP)
}

// DoToken sends a request with the API token and no cookie.
func (c *Client) DoToken(method, path string, body any) *http.Response {
	c.t.Helper()
	return c.do(method, path, body, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+c.Token) }, &http.Client{Timeout: 2 * time.Minute})
}

// DoTokenStream is DoToken for a response that lasts as long as the server's work (a
// provider step's event stream): no time limit of its own, since the server's limits and
// the test's -timeout bound it, and a loaded machine makes any guess at seconds wrong.
func (c *Client) DoTokenStream(method, path string, body any) *http.Response {
	c.t.Helper()
	return c.do(method, path, body, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+c.Token) }, &http.Client{})
}

func (c *Client) do(method, path string, body any, set func(*http.Request), hc *http.Client) *http.Response {
	c.t.Helper()
	return c.doAt(c.Base, method, path, body, set, hc)
}

func (c *Client) doAt(base, method, path string, body any, set func(*http.Request), hc *http.Client) *http.Response {
	c.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case io.Reader:
		rd = b
	case string:
		rd = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if rd != nil {
		if _, isReader := body.(io.Reader); !isReader {
			req.Header.Set("Content-Type", "application/json")
		}
	}
	set(req)
	resp, err := hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// MustJSON sends a request with the session and decodes the JSON answer into out, failing
// the test unless the status is want.
func (c *Client) MustJSON(method, path string, body any, want int, out any) {
	c.t.Helper()
	resp := c.Do(method, path, body)
	Decode(c.t, resp, want, out)
}

// Decode checks resp's status and decodes its JSON body into out (nil: discard).
func Decode(t testing.TB, resp *http.Response, want int, out any) {
	t.Helper()
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: status %d, want %d: %s", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, want, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", resp.Request.Method, resp.Request.URL.Path, data, err)
		}
	}
}

// ErrorOf reads an error response and checks its shape.
func ErrorOf(t testing.TB, resp *http.Response, want int) api.ErrorBody {
	t.Helper()
	var e api.Error
	Decode(t, resp, want, &e)
	if e.Error.Code == "" || e.Error.Message == "" {
		t.Fatalf("%s %s: error without code or message: %+v", resp.Request.Method, resp.Request.URL.Path, e)
	}
	return e.Error
}

// Token signs in through POST /auth/token (as `paddock login` does) and returns the API
// token.
func (e *Env) Token(t testing.TB, username, password string) string {
	t.Helper()
	body, _ := json.Marshal(api.TokenRequest{Username: username, Password: password, Name: "tests"})
	resp, err := http.Post(e.URL+"/auth/token", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var tok api.Token
	Decode(t, resp, http.StatusCreated, &tok)
	return tok.Secret
}

// Metrics reads the metrics as a scraper on metrics.listen does, past the main
// listener's check.
func (e *Env) Metrics(t testing.TB) string {
	t.Helper()
	rec := httptest.NewRecorder()
	e.Server.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("metrics: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}
