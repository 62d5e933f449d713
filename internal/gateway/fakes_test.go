package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// fakeProvider is a real HTTP server that behaves like the provider APIs the gateway
// fronts, as far as the gateway can tell: it checks the key the way they do (401 with the
// key masked in the message, as OpenAI's does), streams server-sent events with pauses
// between them, and reports usage where the real APIs do.
type fakeProvider struct {
	kind string
	key  string
	srv  *httptest.Server

	// in and out are the usage it reports for every completion.
	in, out int64
	// events is how many content events a stream has; gap is the pause between them.
	events int
	gap    time.Duration
	// hold, when set, makes a stream wait on it after its first event.
	hold chan struct{}
	// linger, when set, makes a stream wait on it after its last event, before it ends.
	linger chan struct{}

	mu   sync.Mutex
	seen []seenRequest
}

// seenRequest is a request as it reached the provider.
type seenRequest struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   []byte
}

func newFakeProvider(t testing.TB, kind, key string) *fakeProvider {
	t.Helper()
	f := &fakeProvider{kind: kind, key: key, in: 11, out: 7, events: 3, gap: time.Millisecond}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeProvider) last(t testing.TB) seenRequest {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.seen) == 0 {
		t.Fatalf("the %s provider received no request", f.kind)
	}
	return f.seen[len(f.seen)-1]
}

func (f *fakeProvider) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.seen)
}

func (f *fakeProvider) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.seen = append(f.seen, seenRequest{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
	f.mu.Unlock()
	if !f.authorized(w, r) {
		return
	}
	switch r.URL.Path {
	case "/v1/chat/completions", "/v1/messages":
		var req struct {
			Model         string `json:"model"`
			Stream        bool   `json:"stream"`
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		switch {
		case req.Stream && f.kind == KindOpenAI:
			f.streamOpenAI(w, r, req.Model, req.StreamOptions.IncludeUsage)
		case req.Stream:
			f.streamAnthropic(w, r, req.Model)
		default:
			f.complete(w, req.Model)
		}
	case "/v1/models":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[{"id":"model-a"},{"id":"model-b"}]}`)
	case "/v1/embeddings": // a big answer with its usage at the very end
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[`)
		row := `{"object":"embedding","index":0,"embedding":[` + strings.Repeat("0.0123456789,", 1000) + `0.5]},`
		for range (16 << 20) / len(row) {
			io.WriteString(w, row)
		}
		fmt.Fprintf(w, `{"object":"embedding","index":1,"embedding":[0.1]}],"model":"emb","usage":{"prompt_tokens":%d,"total_tokens":%d}}`, f.in, f.in)
	case "/v1/echo-key": // a misbehaving provider: the key in a header and in an error
		w.Header().Set("X-Debug-Auth", r.Header.Get("Authorization")+r.Header.Get("X-Api-Key"))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"message":"bad request from %s%s"}}`, r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"))
	case "/v1/rate-limited": // the provider's own 429
		w.Header().Set("Retry-After", "7")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}`)
	case "/v1/redirect":
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	case "/v1/break": // a stream the provider breaks off mid-answer
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"partial\":true}\n\n")
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	default:
		http.NotFound(w, r)
	}
}

// authorized checks the key as the provider would, answering 401 as it does: OpenAI's
// message shows the key it got, masked, as the real one does.
func (f *fakeProvider) authorized(w http.ResponseWriter, r *http.Request) bool {
	w.Header().Set("Content-Type", "application/json")
	if f.kind == KindOpenAI {
		got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if got == f.key {
			return true
		}
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, mask(got))
		return false
	}
	if r.Header.Get("X-Api-Key") == f.key && r.Header.Get("Anthropic-Version") != "" {
		return true
	}
	w.WriteHeader(http.StatusUnauthorized)
	io.WriteString(w, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`)
	return false
}

func mask(k string) string {
	if len(k) < 8 {
		return "***"
	}
	return k[:3] + strings.Repeat("*", len(k)-7) + k[len(k)-4:]
}

// complete answers a completion that is not streamed. The answer's text holds a decoy
// "usage" in a string, which must not count.
func (f *fakeProvider) complete(w http.ResponseWriter, model string) {
	w.Header().Set("Content-Type", "application/json")
	if f.kind == KindOpenAI {
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"say \"usage\":{\"prompt_tokens\":999999}"},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":0}}}`,
			model, f.in, f.out, f.in+f.out)
		return
	}
	fmt.Fprintf(w, `{"id":"msg_1","type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":"\"usage\": {\"input_tokens\": 999999}"}],"stop_reason":"end_turn","usage":{"input_tokens":%d,"output_tokens":%d}}`,
		model, f.in, f.out)
}

// pause waits between events: on hold after the first one when it is set, else gap.
func (f *fakeProvider) pause(r *http.Request, first bool) bool {
	var wait <-chan time.Time
	var hold <-chan struct{}
	if first && f.hold != nil {
		hold = f.hold
	} else {
		wait = time.After(f.gap)
	}
	select {
	case <-wait:
	case <-hold:
	case <-r.Context().Done():
		return false
	case <-time.After(10 * time.Second):
		return false
	}
	return true
}

func (f *fakeProvider) streamOpenAI(w http.ResponseWriter, r *http.Request, model string, includeUsage bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	usageNull := ""
	if includeUsage {
		usageNull = `,"usage":null`
	}
	for i := range f.events {
		fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d\"},\"finish_reason\":null}]%s}\n\n", model, i, usageNull)
		w.(http.Flusher).Flush()
		if !f.pause(r, i == 0) {
			return
		}
	}
	if includeUsage {
		fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"model\":%q,\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", model, f.in, f.out, f.in+f.out)
	}
	io.WriteString(w, "data: [DONE]\n\n")
	f.stay(w, r)
}

// stay keeps a stream open after its last event while linger is set.
func (f *fakeProvider) stay(w http.ResponseWriter, r *http.Request) {
	if f.linger == nil {
		return
	}
	w.(http.Flusher).Flush()
	select {
	case <-f.linger:
	case <-r.Context().Done():
	}
}

func (f *fakeProvider) streamAnthropic(w http.ResponseWriter, r *http.Request, model string) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	event := func(name, data string) {
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data)
		w.(http.Flusher).Flush()
	}
	event("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":%q,"content":[],"stop_reason":null,"usage":{"input_tokens":%d,"output_tokens":1}}}`, model, f.in))
	if !f.pause(r, true) {
		return
	}
	event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
	for i := range f.events {
		event("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"tok%d"}}`, i))
		if !f.pause(r, false) {
			return
		}
	}
	event("content_block_stop", `{"type":"content_block_stop","index":0}`)
	event("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":%d}}`, f.out))
	event("message_stop", `{"type":"message_stop"}`)
	f.stay(w, r)
}

// fakeClock is a settable clock for limits and budgets.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// syncBuffer is a log sink tests read while the gateway writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// harness is a gateway in front of a fake OpenAI and a fake Anthropic, mounted the way the
// control plane mounts it (http.StripPrefix("/gateway", …)), one front server per
// sandbox: the front stands for the sandbox's channel and puts its Caller in the context.
// Every key is a canary: the harness checks at cleanup that neither key is anywhere in
// the logs (debug level), the metrics, or any response a test read through it.
type harness struct {
	t         testing.TB
	gw        *Gateway
	reg       *prometheus.Registry
	logs      *syncBuffer
	clock     *fakeClock
	openai    *fakeProvider
	anthropic *fakeProvider
	usage     chan Usage
	cfg       Config
	keys      []string

	mu     sync.Mutex
	fronts map[Caller]*httptest.Server
	seen   bytes.Buffer // every response's headers and body, for the canary check
}

var (
	alice = Caller{UserID: "alice", SandboxID: "sb-alice-1"}
	bob   = Caller{UserID: "bob", SandboxID: "sb-bob-1"}
)

func canary(prefix string) string {
	b := make([]byte, 12)
	rand.Read(b)
	return prefix + "CANARY" + hex.EncodeToString(b)
}

// newHarness builds the gateway; edit, when set, changes the configuration first. The
// OpenAI key comes from an environment variable, Anthropic's from a file.
func newHarness(t testing.TB, edit func(*Config, *Options)) *harness {
	t.Helper()
	h := &harness{t: t, reg: prometheus.NewRegistry(), logs: &syncBuffer{}, usage: make(chan Usage, 64),
		clock: &fakeClock{t: time.Date(2026, 3, 14, 21, 30, 0, 0, time.UTC)}, fronts: map[Caller]*httptest.Server{}}
	okey, akey := canary("sk-proj-"), canary("sk-ant-api03-")
	h.keys = []string{okey, akey}
	h.openai = newFakeProvider(t, KindOpenAI, okey)
	h.anthropic = newFakeProvider(t, KindAnthropic, akey)
	env := "PADDOCK_GATEWAY_TEST_OPENAI_KEY"
	t.Setenv(env, okey)
	file := filepath.Join(t.TempDir(), "anthropic.key")
	if err := os.WriteFile(file, []byte(akey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.cfg = Config{Providers: []Provider{
		{Name: "openai", Kind: KindOpenAI, BaseURL: h.openai.srv.URL, APIKeyEnv: env},
		{Name: "anthropic", Kind: KindAnthropic, BaseURL: h.anthropic.srv.URL + "/", APIKeyFile: file},
	}}
	opts := Options{
		Log:        slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Registerer: h.reg,
		Now:        h.clock.Now,
		Usage: func(_ context.Context, u Usage) {
			select {
			case h.usage <- u:
			default:
				t.Errorf("usage sink full; dropped %+v", u)
			}
		},
	}
	if edit != nil {
		edit(&h.cfg, &opts)
	}
	gw, err := New(h.cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	h.gw = gw
	t.Cleanup(func() {
		h.mu.Lock()
		for _, s := range h.fronts {
			s.Close()
		}
		h.mu.Unlock()
		gw.Close()
		h.assertNoKey()
	})
	return h
}

// base is the gateway's URL as sandbox c reaches it: …/gateway.
func (h *harness) base(c Caller) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.fronts[c]
	if s == nil {
		inner := http.StripPrefix("/gateway", h.gw)
		s = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inner.ServeHTTP(w, r.WithContext(WithCaller(r.Context(), c)))
		}))
		h.fronts[c] = s
	}
	return s.URL + "/gateway"
}

// do sends a request as c and returns the response with its body read (and kept for the
// canary check).
func (h *harness) do(c Caller, method, path, body string, hdr http.Header) (*http.Response, string) {
	h.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, h.base(c)+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if body != "" && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		h.t.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	h.keep(res, b)
	return res, string(b)
}

func (h *harness) keep(res *http.Response, body []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	res.Header.Write(&h.seen)
	h.seen.Write(body)
}

// assertNoKey fails the test if a key is in the logs, the metrics, or a response.
func (h *harness) assertNoKey() {
	h.t.Helper()
	var metrics bytes.Buffer
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		expfmt.MetricFamilyToText(&metrics, mf)
	}
	h.mu.Lock()
	seen := h.seen.String()
	h.mu.Unlock()
	for _, k := range h.keys {
		for where, s := range map[string]string{"the log": h.logs.String(), "the metrics": metrics.String(), "a response": seen} {
			if strings.Contains(s, k) || strings.Contains(s, k[len(k)-16:]) || strings.Contains(s, mask(k)) {
				h.t.Errorf("a platform key (or its tail) is in %s:\n%s", where, s)
			}
		}
	}
}

// nextUsage waits for the usage sink's next report.
func (h *harness) nextUsage() Usage {
	h.t.Helper()
	select {
	case u := <-h.usage:
		return u
	case <-time.After(5 * time.Second):
		h.t.Fatal("no usage reported")
		return Usage{}
	}
}

// noUsage checks that no usage was reported.
func (h *harness) noUsage() {
	h.t.Helper()
	select {
	case u := <-h.usage:
		h.t.Fatalf("unexpected usage %+v", u)
	default:
	}
}

func (h *harness) provider(kind string) *fakeProvider {
	if kind == KindOpenAI {
		return h.openai
	}
	return h.anthropic
}

// completionPath and completionBody are a completion request in kind's API.
func completionPath(kind string) string {
	if kind == KindOpenAI {
		return "/openai/v1/chat/completions"
	}
	return "/anthropic/v1/messages"
}

func completionBody(kind string, stream bool) string {
	if kind == KindOpenAI {
		return fmt.Sprintf(`{"model":"gpt-test","stream":%t,"messages":[{"role":"user","content":"hi <b>&</b>"}]}`, stream)
	}
	return fmt.Sprintf(`{"model":"claude-test","max_tokens":64,"stream":%t,"messages":[{"role":"user","content":"hi"}]}`, stream)
}
