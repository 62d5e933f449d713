package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

var kinds = []string{KindOpenAI, KindAnthropic}

// The sandbox's credentials never reach the provider, whatever they are called; the
// platform key does, in the provider's way; the rest of the request arrives as sent.
func TestCredentialsReplaced(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, nil)
			sandboxSecret := "sandbox-own-secret-value"
			hdr := http.Header{
				"Authorization":       {"Bearer " + sandboxSecret},
				"X-Api-Key":           {sandboxSecret},
				"Api-Key":             {sandboxSecret},
				"Cookie":              {"session=" + sandboxSecret},
				"Proxy-Authorization": {"Basic " + sandboxSecret},
				"X-Custom-Token":      {sandboxSecret},
				"X-My-Secret":         {sandboxSecret},
				"X-Goog-Api-Key":      {sandboxSecret},
				"Openai-Organization": {"org-" + sandboxSecret},
				"Openai-Project":      {"proj-" + sandboxSecret},
				"X-Forwarded-For":     {"10.0.0.9"},
				"X-Paddock-Sandbox":   {"someone-else"},
				"Connection":          {"X-Hop"},
				"X-Hop":               {sandboxSecret},
				"X-Request-Note":      {"kept"},
				"Idempotency-Key":     {"idem-1"},
				"Openai-Beta":         {"assistants=v2"},
				"User-Agent":          {"sdk/1.0"},
			}
			if kind == KindAnthropic {
				hdr.Set("Anthropic-Version", "2024-10-22")
				hdr.Set("Anthropic-Beta", "prompt-caching-2024-07-31")
			}
			path := completionPath(kind) + "?api_key=" + sandboxSecret + "&limit=2&KEY=" + sandboxSecret
			res, body := h.do(alice, "POST", path, completionBody(kind, false), hdr)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", res.StatusCode, body)
			}
			got := h.provider(kind).last(t)
			var all strings.Builder
			got.Header.Write(&all)
			all.WriteString(got.RawQuery)
			if strings.Contains(all.String(), sandboxSecret) {
				t.Errorf("the sandbox's credential reached the provider:\n%s", all.String())
			}
			for _, k := range []string{"X-Forwarded-For", "X-Paddock-Sandbox", "X-Hop", "Cookie", "Openai-Organization"} {
				if got.Header.Get(k) != "" {
					t.Errorf("%s reached the provider", k)
				}
			}
			for k, want := range map[string]string{"X-Request-Note": "kept", "Idempotency-Key": "idem-1", "Openai-Beta": "assistants=v2", "User-Agent": "sdk/1.0"} {
				if g := got.Header.Get(k); g != want {
					t.Errorf("%s = %q at the provider, want %q", k, g, want)
				}
			}
			if got.RawQuery != "limit=2" {
				t.Errorf("query at the provider = %q, want limit=2", got.RawQuery)
			}
			key := h.provider(kind).key
			if kind == KindOpenAI {
				if g := got.Header.Get("Authorization"); g != "Bearer "+key {
					t.Errorf("Authorization at the provider is not the platform key")
				}
				if got.Header.Get("X-Api-Key") != "" {
					t.Errorf("x-api-key sent to an openai provider")
				}
			} else {
				if got.Header.Get("X-Api-Key") != key {
					t.Errorf("x-api-key at the provider is not the platform key")
				}
				if got.Header.Get("Authorization") != "" {
					t.Errorf("Authorization sent to an anthropic provider")
				}
				if v := got.Header.Get("Anthropic-Version"); v != "2024-10-22" {
					t.Errorf("anthropic-version = %q, want the client's", v)
				}
				if v := got.Header.Get("Anthropic-Beta"); v == "" {
					t.Errorf("anthropic-beta dropped")
				}
			}
		})
	}
}

func TestAnthropicVersionDefault(t *testing.T) {
	h := newHarness(t, nil)
	res, body := h.do(alice, "POST", "/anthropic/v1/messages", completionBody(KindAnthropic, false), nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", res.StatusCode, body)
	}
	if v := h.anthropic.last(t).Header.Get("Anthropic-Version"); v != DefaultAnthropicVersion {
		t.Fatalf("anthropic-version = %q, want %q", v, DefaultAnthropicVersion)
	}
}

func TestIsCredentialHeader(t *testing.T) {
	for name, want := range map[string]bool{
		"Authorization": true, "Proxy-Authorization": true, "X-Api-Key": true, "api-key": true,
		"Cookie": true, "X-Auth-Token": true, "X-Amz-Security-Token": true, "X-Client-Secret": true,
		"X-Session-Id": true, "X-Password": true, "X-Credentials": true, "OAuth-Thing": true,
		"Idempotency-Key": false, "Content-Type": false, "User-Agent": false, "Anthropic-Version": false,
		"Anthropic-Beta": false, "OpenAI-Beta": false, "X-Stainless-Lang": false, "Accept": false,
	} {
		if got := isCredentialHeader(name); got != want {
			t.Errorf("isCredentialHeader(%q) = %v, want %v", name, got, want)
		}
	}
}

// A streamed answer reaches the client event by event: the client reads the first event
// while the provider still holds the rest back.
func TestStreamIsNotBuffered(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, nil)
			fp := h.provider(kind)
			fp.hold = make(chan struct{})
			// The request, its headers and its first event must all come while the
			// provider holds the rest back.
			type first struct {
				res  *http.Response
				br   *bufio.Reader
				line string
				err  error
			}
			got := make(chan first, 1)
			go func() {
				res, err := http.Post(h.base(alice)+completionPath(kind), "application/json", strings.NewReader(completionBody(kind, true)))
				if err != nil {
					got <- first{err: err}
					return
				}
				br := bufio.NewReader(res.Body)
				for {
					line, err := br.ReadString('\n')
					if err != nil || strings.HasPrefix(line, "data:") {
						got <- first{res, br, line, err}
						return
					}
				}
			}()
			var f first
			select {
			case f = <-got:
				if f.err != nil {
					t.Fatal(f.err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the first event did not arrive while the provider held the rest: the gateway buffers")
			}
			res, br := f.res, f.br
			defer res.Body.Close()
			if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
				t.Fatalf("Content-Type %q", ct)
			}
			close(fp.hold)
			rest, err := io.ReadAll(br)
			if err != nil {
				t.Fatal(err)
			}
			want := "message_stop"
			if kind == KindOpenAI {
				want = "[DONE]"
			}
			if !strings.Contains(string(rest), want) {
				t.Fatalf("stream ended without %s: %q", want, rest)
			}
			h.keep(res, rest)
			if u := h.nextUsage(); u.InputTokens != fp.in || u.OutputTokens != fp.out {
				t.Fatalf("usage %+v, want %d in, %d out", u, fp.in, fp.out)
			}
		})
	}
}

// Usage is read from streamed and plain answers of both kinds, and counted per user and
// sandbox: the Usage sink, the ledger and the metrics.
func TestUsageCounted(t *testing.T) {
	h := newHarness(t, nil)
	var wantIn, wantOut = map[string]float64{}, map[string]float64{}
	for _, kind := range kinds {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%t", kind, stream), func(t *testing.T) {
				fp := h.provider(kind)
				fp.in, fp.out = 100+int64(len(kind)), 20
				if stream {
					fp.out = 30
				}
				res, body := h.do(bob, "POST", completionPath(kind), completionBody(kind, stream), nil)
				if res.StatusCode != http.StatusOK {
					t.Fatalf("status %d: %s", res.StatusCode, body)
				}
				u := h.nextUsage()
				want := Usage{Caller: bob, Provider: kind, Model: map[string]string{KindOpenAI: "gpt-test", KindAnthropic: "claude-test"}[kind],
					InputTokens: fp.in, OutputTokens: fp.out}
				if u != want {
					t.Fatalf("usage %+v, want %+v", u, want)
				}
				wantIn[kind] += float64(fp.in)
				wantOut[kind] += float64(fp.out)
			})
		}
	}
	for _, kind := range kinds {
		if got := counter(t, h.reg, "paddock_gateway_tokens_total", map[string]string{"provider": kind, "direction": "input"}); got != wantIn[kind] {
			t.Errorf("%s input tokens metric = %v, want %v", kind, got, wantIn[kind])
		}
		if got := counter(t, h.reg, "paddock_gateway_tokens_total", map[string]string{"provider": kind, "direction": "output"}); got != wantOut[kind] {
			t.Errorf("%s output tokens metric = %v, want %v", kind, got, wantOut[kind])
		}
		spent, _ := h.gw.ledger.Spent(t.Context(), bob.UserID, kind)
		if want := int64(wantIn[kind] + wantOut[kind]); spent != want {
			t.Errorf("ledger has %d tokens for bob on %s, want %d", spent, kind, want)
		}
		if got := counter(t, h.reg, "paddock_gateway_requests_total", map[string]string{"provider": kind, "code": "200"}); got != 2 {
			t.Errorf("%s requests metric = %v, want 2", kind, got)
		}
	}
	if spent, _ := h.gw.ledger.Spent(t.Context(), alice.UserID, KindOpenAI); spent != 0 {
		t.Errorf("alice was charged %d tokens for bob's requests", spent)
	}
}

// An answer far larger than any buffer the gateway would keep (a batch of embeddings)
// passes whole, and its usage, at the very end, is counted.
func TestLargeAnswerUsage(t *testing.T) {
	h := newHarness(t, nil)
	res, body := h.do(alice, "POST", "/openai/v1/embeddings", `{"model":"emb","input":["a","b"]}`, nil)
	if res.StatusCode != http.StatusOK || len(body) < 16e6 {
		t.Fatalf("status %d, %d bytes", res.StatusCode, len(body))
	}
	var v struct {
		Data []json.RawMessage
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil || len(v.Data) < 2 {
		t.Fatalf("the answer did not arrive whole: %v", err)
	}
	if u := h.nextUsage(); u.InputTokens != h.openai.in || u.OutputTokens != 0 {
		t.Fatalf("usage %+v", u)
	}
}

// An OpenAI stream is made to report its usage even when the client did not ask; what
// else the client put in stream_options stays.
func TestIncludeUsageSet(t *testing.T) {
	h := newHarness(t, nil)
	for _, tc := range []struct{ name, body, wantOpts string }{
		{"absent", `{"model":"m","stream":true,"messages":[]}`, `{"include_usage":true}`},
		{"false", `{"model":"m","stream":true,"stream_options":{"include_usage":false,"x":[1,2]}}`, `{"include_usage":true,"x":[1,2]}`},
		{"null", `{"model":"m","stream":true,"stream_options":null}`, `{"include_usage":true}`},
		{"already", `{"stream_options":{"include_usage":true},"model":"m","stream":true}`, `{"include_usage":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, body := h.do(alice, "POST", "/openai/v1/chat/completions", tc.body, nil)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", res.StatusCode, body)
			}
			var got map[string]json.RawMessage
			if err := json.Unmarshal(h.openai.last(t).Body, &got); err != nil {
				t.Fatal(err)
			}
			if string(got["stream_options"]) != tc.wantOpts {
				t.Errorf("stream_options at the provider = %s, want %s", got["stream_options"], tc.wantOpts)
			}
			if u := h.nextUsage(); u.InputTokens == 0 || u.OutputTokens == 0 {
				t.Errorf("usage %+v", u)
			}
		})
	}
	// A request that is not a stream goes as it was sent, byte for byte.
	body := `{"model":"m",  "stream":false, "messages":[{"role":"user","content":"<&>"}]}`
	h.do(alice, "POST", "/openai/v1/chat/completions", body, nil)
	if got := string(h.openai.last(t).Body); got != body {
		t.Errorf("body changed: %s", got)
	}
	h.nextUsage()
}

// Requests per minute: a user gets a minute's worth at once, then 429 with Retry-After
// in the provider's error shape, until the bucket refills; other users are not affected.
func TestRequestsPerMinute(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, func(c *Config, _ *Options) {
				for i := range c.Providers {
					c.Providers[i].RequestsPerMinute = 2
				}
			})
			path := map[string]string{KindOpenAI: "/openai/v1/models", KindAnthropic: "/anthropic/v1/models"}[kind]
			for i := range 2 {
				if res, body := h.do(alice, "GET", path, "", nil); res.StatusCode != http.StatusOK && res.StatusCode != http.StatusNotFound {
					t.Fatalf("request %d: %d %s", i, res.StatusCode, body)
				}
			}
			before := h.provider(kind).count()
			res, body := h.do(alice, "GET", path, "", nil)
			msg := assertRateLimited(t, kind, res, body)
			if !strings.Contains(msg, "requests per minute") || !strings.Contains(msg, " 2 ") || !strings.Contains(msg, kind) {
				t.Errorf("message does not say which limit: %q", msg)
			}
			if ra := res.Header.Get("Retry-After"); ra != "30" {
				t.Errorf("Retry-After = %q, want 30 (one request refills every 30 s)", ra)
			}
			if h.provider(kind).count() != before {
				t.Error("a refused request reached the provider")
			}
			if res, _ := h.do(bob, "GET", path, "", nil); res.StatusCode == http.StatusTooManyRequests {
				t.Error("bob was limited for alice's requests")
			}
			h.clock.Add(30 * time.Second)
			if res, body := h.do(alice, "GET", path, "", nil); res.StatusCode == http.StatusTooManyRequests {
				t.Errorf("still limited after the bucket refilled: %s", body)
			}
			if res, _ := h.do(alice, "GET", path, "", nil); res.StatusCode != http.StatusTooManyRequests {
				t.Errorf("a refill of one request let two through")
			}
		})
	}
}

// Tokens per day: once a user's spent tokens reach the budget, 429 until 00:00 UTC.
func TestTokensPerDay(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, func(c *Config, _ *Options) {
				for i := range c.Providers {
					c.Providers[i].TokensPerDay = 30 // each completion uses 11 + 7
				}
			})
			for i := range 2 { // 0, then 18 < 30: both admitted, then 36 ≥ 30
				if res, body := h.do(alice, "POST", completionPath(kind), completionBody(kind, i == 1), nil); res.StatusCode != http.StatusOK {
					t.Fatalf("request %d: %d %s", i, res.StatusCode, body)
				}
				h.nextUsage()
			}
			res, body := h.do(alice, "POST", completionPath(kind), completionBody(kind, false), nil)
			msg := assertRateLimited(t, kind, res, body)
			for _, want := range []string{"tokens per day", "36", "30", "00:00 UTC", "2026-03-15T00:00:00Z"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q does not say %q", msg, want)
				}
			}
			// The clock is at 21:30 UTC: the budget resets in 2.5 hours.
			if ra := res.Header.Get("Retry-After"); ra != strconv.Itoa(int((150 * time.Minute).Seconds())) {
				t.Errorf("Retry-After = %q, want 9000", ra)
			}
			if res, _ := h.do(bob, "POST", completionPath(kind), completionBody(kind, false), nil); res.StatusCode != http.StatusOK {
				t.Errorf("bob refused for alice's spending")
			}
			h.nextUsage()
			h.clock.Add(150 * time.Minute)
			if res, body := h.do(alice, "POST", completionPath(kind), completionBody(kind, false), nil); res.StatusCode != http.StatusOK {
				t.Errorf("still refused after midnight: %s", body)
			}
			h.nextUsage()
		})
	}
}

// assertRateLimited checks a 429 in kind's error shape and returns its message.
func assertRateLimited(t *testing.T, kind string, res *http.Response, body string) string {
	t.Helper()
	if res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429: %s", res.StatusCode, body)
	}
	if _, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil {
		t.Errorf("Retry-After %q is not seconds", res.Header.Get("Retry-After"))
	}
	msg, typ := errorOf(t, kind, body)
	want := map[string]string{KindOpenAI: "rate_limit_exceeded", KindAnthropic: "rate_limit_error"}[kind]
	if typ != want {
		t.Errorf("error type %q, want %q", typ, want)
	}
	return msg
}

// errorOf decodes an error body in kind's shape.
func errorOf(t *testing.T, kind, body string) (msg, typ string) {
	t.Helper()
	if kind == KindAnthropic {
		var e anthropicError
		if err := json.Unmarshal([]byte(body), &e); err != nil || e.Type != "error" {
			t.Fatalf("not Anthropic's error shape: %s", body)
		}
		return e.Error.Message, e.Error.Type
	}
	var e openAIError
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Message == "" {
		t.Fatalf("not OpenAI's error shape: %s", body)
	}
	return e.Error.Message, e.Error.Type
}

// The gateway's own refusals: each has its status, says what to do, and reaches no
// provider.
func TestRefusals(t *testing.T) {
	h := newHarness(t, func(c *Config, _ *Options) { c.MaxRequestBytes = 1024 })
	big := `{"model":"m","messages":[{"content":"` + strings.Repeat("x", 2048) + `"}]}`
	for _, tc := range []struct {
		name, method, path, body string
		hdr                      http.Header
		chunked                  bool
		status                   int
		kind                     string // error shape; "" is paddock's
		want                     []string
	}{
		{name: "unknown provider", method: "GET", path: "/nope/v1/models", status: 404, want: []string{`"nope"`, "anthropic, openai"}},
		{name: "no provider", method: "GET", path: "", status: 404, want: []string{"anthropic, openai"}},
		{name: "method", method: "DELETE", path: "/openai/v1/files/f1", status: 405, kind: KindOpenAI, want: []string{"GET and POST"}},
		{name: "too large", method: "POST", path: "/openai/v1/chat/completions", body: big, status: 413, kind: KindOpenAI, want: []string{"1024 bytes", "max_request_bytes"}},
		{name: "too large, chunked", method: "POST", path: "/anthropic/v1/messages", body: big, chunked: true, status: 413, kind: KindAnthropic, want: []string{"1024 bytes"}},
		{name: "dot segment", method: "GET", path: "/openai/v1/../../admin", status: 400, kind: KindOpenAI, want: []string{`".."`}},
		{name: "encoded dot segment", method: "GET", path: "/anthropic/v1/%2e%2E/admin", status: 400, kind: KindAnthropic, want: []string{"not allowed"}},
		{name: "encoded slash", method: "GET", path: "/openai/v1/a%2F..%2Fb", status: 400, kind: KindOpenAI, want: []string{"encoded slashes"}},
		{name: "compressed body", method: "POST", path: "/openai/v1/chat/completions", body: "{}", hdr: http.Header{"Content-Encoding": {"gzip"}}, status: 400, kind: KindOpenAI, want: []string{"uncompressed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := h.openai.count() + h.anthropic.count()
			var rd io.Reader
			if tc.body != "" {
				rd = strings.NewReader(tc.body)
				if tc.chunked {
					rd = io.MultiReader(rd) // hides the length: the client sends it chunked
				}
			}
			req, _ := http.NewRequest(tc.method, h.base(alice)+tc.path, rd)
			for k, v := range tc.hdr {
				req.Header[k] = v
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			h.keep(res, b)
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tc.status, b)
			}
			var msg string
			if tc.kind == "" {
				var e struct {
					Error struct{ Code, Message string }
				}
				if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" {
					t.Fatalf("not paddock's error shape: %s", b)
				}
				msg = e.Error.Message
			} else {
				msg, _ = errorOf(t, tc.kind, string(b))
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q does not say %q", msg, w)
				}
			}
			if tc.status == 405 && res.Header.Get("Allow") != "GET, POST" {
				t.Errorf("Allow = %q", res.Header.Get("Allow"))
			}
			if after := h.openai.count() + h.anthropic.count(); after != before {
				t.Error("a refused request reached a provider")
			}
		})
	}
	if got := counter(t, h.reg, "paddock_gateway_requests_total", map[string]string{"provider": "unknown", "code": "404"}); got != 2 {
		t.Errorf("unknown provider requests metric = %v, want 2", got)
	}
}

// A request that reaches the gateway without a caller is a wiring bug: 403, logged.
func TestNoCaller(t *testing.T) {
	h := newHarness(t, nil)
	srv := httptest.NewServer(http.StripPrefix("/gateway", h.gw))
	defer srv.Close()
	res, err := http.Post(srv.URL+"/gateway/openai/v1/chat/completions", "application/json", strings.NewReader(completionBody(KindOpenAI, false)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	h.keep(res, b)
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("status %d: %s", res.StatusCode, b)
	}
	if msg, _ := errorOf(t, KindOpenAI, string(b)); !strings.Contains(msg, "which sandbox") {
		t.Errorf("message %q", msg)
	}
	if !strings.Contains(h.logs.String(), "without a caller") {
		t.Errorf("not logged:\n%s", h.logs.String())
	}
	if h.openai.count() != 0 {
		t.Error("the request reached the provider")
	}
}

// A provider that does not answer gets a 502 that names it and nothing of the error's
// text; so does one that refuses the platform's key, whose 401 (which quotes the key,
// masked) the sandbox never sees.
func TestUpstreamFailures(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()
	for _, tc := range []struct {
		name     string
		kind     string
		down     bool // the provider's address refuses connections
		wrongKey bool // the provider takes another key than the gateway's
		want     []string
	}{
		{"down", KindOpenAI, true, false, []string{`"openai"`, "not reachable", "connection refused"}},
		{"down", KindAnthropic, true, false, []string{`"anthropic"`, "not reachable"}},
		{"wrong key", KindOpenAI, false, true, []string{"refused the platform's key", "operator"}},
		{"wrong key", KindAnthropic, false, true, []string{"refused the platform's key"}},
	} {
		t.Run(tc.name+"/"+tc.kind, func(t *testing.T) {
			h := newHarness(t, func(c *Config, _ *Options) {
				for i := range c.Providers {
					if tc.down && c.Providers[i].Kind == tc.kind {
						c.Providers[i].BaseURL = down
					}
				}
			})
			if tc.wrongKey {
				h.provider(tc.kind).key = "sk-the-right-one"
			}
			res, body := h.do(alice, "POST", completionPath(tc.kind), completionBody(tc.kind, false), nil)
			if res.StatusCode != http.StatusBadGateway {
				t.Fatalf("status %d: %s", res.StatusCode, body)
			}
			msg, _ := errorOf(t, tc.kind, body)
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q does not say %q", msg, w)
				}
			}
			if strings.Contains(msg, "127.0.0.1") || strings.Contains(msg, "dial") || strings.Contains(msg, "Incorrect") {
				t.Errorf("message %q shows the upstream's own error", msg)
			}
			if got := counter(t, h.reg, "paddock_gateway_requests_total", map[string]string{"provider": tc.kind, "code": "502"}); got != 1 {
				t.Errorf("502s counted: %v", got)
			}
		})
	}
}

// The provider's own errors pass through (with their Retry-After), minus any echo of the
// key, in a header or in the body.
func TestProviderErrors(t *testing.T) {
	h := newHarness(t, nil)
	res, body := h.do(alice, "POST", "/openai/v1/rate-limited", "{}", nil)
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "7" || !strings.Contains(body, "slow down") {
		t.Errorf("the provider's 429 did not pass: %d %v %s", res.StatusCode, res.Header, body)
	}
	for _, kind := range kinds {
		res, body = h.do(alice, "POST", "/"+kind+"/v1/echo-key", "{}", nil)
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(body, "bad request from") || !strings.Contains(body, redacted) {
			t.Errorf("%s: %d %s", kind, res.StatusCode, body)
		}
		if res.Header.Get("X-Debug-Auth") != "" {
			t.Errorf("%s: a header that echoed the key passed", kind)
		}
	}
	if !strings.Contains(h.logs.String(), "echoed the platform's key") {
		t.Error("the echo was not logged")
	}
	h.noUsage()
}

// A redirect from a provider goes back to the client; the gateway does not follow it
// with the key to wherever it points.
func TestRedirectNotFollowed(t *testing.T) {
	h := newHarness(t, nil)
	var stolen []string
	thief := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stolen = append(stolen, r.Header.Get("Authorization")+r.Header.Get("X-Api-Key"))
	}))
	defer thief.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, kind := range kinds {
		res, err := client.Get(h.base(alice) + "/" + kind + "/v1/redirect?to=" + thief.URL)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		h.keep(res, b)
		if res.StatusCode != http.StatusFound {
			t.Errorf("%s: status %d", kind, res.StatusCode)
		}
	}
	if len(stolen) > 0 {
		t.Fatalf("the gateway followed a redirect: %q", stolen)
	}
}

// A client that reads a stream and leaves before its last chunk (the one that carries the
// usage) is still charged: an estimate, marked as one, which counts against the budget.
func TestAbandonedStreamIsCharged(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			var ledger *MemoryLedger
			h := newHarness(t, func(c *Config, o *Options) {
				ledger = NewMemoryLedger(o.Now)
				o.Ledger = ledger
			})
			fp := h.provider(kind)
			fp.hold = make(chan struct{}) // the provider sends one event, then waits
			defer close(fp.hold)
			body := completionBody(kind, true)
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, "POST", h.base(alice)+completionPath(kind), strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(res.Body)
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					t.Fatalf("stream ended before its first event: %v", err)
				}
				if strings.HasPrefix(line, "data:") {
					break
				}
			}
			cancel() // the client leaves with the answer under way
			res.Body.Close()
			u := h.nextUsage()
			if !u.Estimated || u.OutputTokens < 1 || u.InputTokens < int64(len(body)/4) {
				t.Fatalf("usage of an abandoned stream %+v, want an estimate of at least %d in and 1 out", u, len(body)/4)
			}
			if n, _ := ledger.Spent(context.Background(), alice.UserID, kind); n != u.InputTokens+u.OutputTokens {
				t.Fatalf("ledger holds %d, want the estimate's %d", n, u.InputTokens+u.OutputTokens)
			}
		})
	}
}

// A client that leaves as soon as it has a stream's last event, while the provider has
// not yet ended the stream (Codex does), has read the whole answer: it pays the
// provider's count, not an estimate.
func TestClientLeavingAfterLastEvent(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, nil)
			fp := h.provider(kind)
			fp.in, fp.out = 5000, 40
			fp.linger = make(chan struct{})
			defer close(fp.linger)
			body := completionBody(kind, true)
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, "POST", h.base(alice)+completionPath(kind), strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			last := map[string]string{KindOpenAI: "data: [DONE]", KindAnthropic: `data: {"type":"message_stop"}`}[kind]
			br := bufio.NewReader(res.Body)
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					t.Fatalf("stream ended before its last event: %v", err)
				}
				if strings.TrimSpace(line) == last {
					break
				}
			}
			cancel()
			res.Body.Close()
			if u := h.nextUsage(); u.Estimated || u.InputTokens != fp.in || u.OutputTokens != fp.out {
				t.Fatalf("usage %+v, want the provider's %d in and %d out", u, fp.in, fp.out)
			}
		})
	}
}

// A stream the provider breaks off ends the client's response as broken too, not as a
// complete answer.
func TestBrokenStream(t *testing.T) {
	h := newHarness(t, nil)
	res, err := http.Post(h.base(alice)+"/openai/v1/break", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	h.keep(res, b)
	if err == nil {
		t.Fatalf("a broken stream read as complete: %q", b)
	}
	if !strings.Contains(string(b), "partial") {
		t.Errorf("what came before the break was lost: %q", b)
	}
}

// Concurrent requests of several users: counts add up (and -race watches the limiter,
// ledger and metrics).
func TestConcurrentUsers(t *testing.T) {
	h := newHarness(t, func(c *Config, _ *Options) {
		c.Providers[0].RequestsPerMinute = 1000
		c.Providers[0].TokensPerDay = 1 << 40
	})
	h.usage = make(chan Usage, 1000)
	users := []Caller{alice, bob, {UserID: "carol", SandboxID: "sb-c"}}
	errs := make(chan error, 60)
	for i := range 60 {
		go func() {
			c := users[i%len(users)]
			res, err := http.Post(h.base(c)+"/openai/v1/chat/completions", "application/json", strings.NewReader(completionBody(KindOpenAI, i%2 == 0)))
			if err == nil {
				_, err = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if err == nil && res.StatusCode != http.StatusOK {
					err = errors.New(res.Status)
				}
			}
			errs <- err
		}()
	}
	for range 60 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// The ledger is written after each answer, in the background; the usage sink hears of
	// each answer once its ledger write is done.
	for range 60 {
		h.nextUsage()
	}
	for _, c := range users {
		spent, _ := h.gw.ledger.Spent(t.Context(), c.UserID, "openai")
		if spent != 20*18 {
			t.Errorf("%s spent %d, want %d", c.UserID, spent, 20*18)
		}
	}
}

// counter reads one series of a counter from reg.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metric
				}
			}
			return value(m)
		}
	}
	return 0
}

func value(m *dto.Metric) float64 {
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return 0
}

// heldLedger is a ledger whose writes wait until release is closed: a store that is slow
// to write.
type heldLedger struct {
	Ledger
	adding  chan struct{} // a value for every write that has begun
	release chan struct{}
	once    sync.Once
}

// free lets the writes through; tests defer it, so that a failing test does not leave
// Close waiting.
func (l *heldLedger) free() { l.once.Do(func() { close(l.release) }) }

func newHeldLedger() *heldLedger {
	return &heldLedger{Ledger: NewMemoryLedger(nil), adding: make(chan struct{}, 16), release: make(chan struct{})}
}

func (l *heldLedger) Add(ctx context.Context, userID, provider string, tokens int64) error {
	l.adding <- struct{}{}
	<-l.release
	return l.Ledger.Add(ctx, userID, provider, tokens)
}

// The end of a streamed answer reaches the client while its usage is still being
// written, so that the client's next request can reuse the connection at once.
func TestAnswerEndsBeforeTheRecord(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			ledger := newHeldLedger()
			h := newHarness(t, func(c *Config, o *Options) {
				o.Ledger = ledger
				for i := range c.Providers {
					c.Providers[i].TokensPerDay = 1000
				}
			})
			defer ledger.free()
			done := make(chan string, 1)
			go func() {
				res, body := h.do(alice, "POST", completionPath(kind), completionBody(kind, true), nil)
				done <- fmt.Sprint(res.StatusCode, " ", len(body))
			}()
			<-ledger.adding
			select {
			case got := <-done:
				if !strings.HasPrefix(got, "200 ") {
					t.Fatalf("answer %s, want 200", got)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the answer's end waits for its usage record")
			}
		})
	}
}

// A user's next request is checked against a budget that counts the previous answer,
// even while that answer's usage is still being written: with a budget of one answer,
// the second, sent right after the first, is refused.
func TestBudgetCountsRecordUnderWay(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			ledger := newHeldLedger()
			h := newHarness(t, func(c *Config, o *Options) {
				o.Ledger = ledger
				for i := range c.Providers {
					c.Providers[i].TokensPerDay = 18 // one completion: 11 + 7
				}
			})
			defer ledger.free()
			if res, body := h.do(alice, "POST", completionPath(kind), completionBody(kind, true), nil); res.StatusCode != http.StatusOK {
				t.Fatalf("first request: %d %s", res.StatusCode, body)
			}
			<-ledger.adding
			type answer struct {
				res  *http.Response
				body string
			}
			second := make(chan answer, 1)
			go func() {
				res, body := h.do(alice, "POST", completionPath(kind), completionBody(kind, false), nil)
				second <- answer{res, body}
			}()
			// The second request must wait for the first's record; if it does not, it
			// is admitted in the meantime.
			select {
			case a := <-second:
				t.Fatalf("second request answered (%d) while the first's usage was being written", a.res.StatusCode)
			case <-time.After(200 * time.Millisecond):
			}
			ledger.free()
			a := <-second
			msg := assertRateLimited(t, kind, a.res, a.body)
			if !strings.Contains(msg, "used 18 of its 18 tokens") {
				t.Errorf("message %q does not count the first answer", msg)
			}
			h.nextUsage()
		})
	}
}

// Close waits for the usage records under way: none is lost at shutdown.
func TestCloseWaitsForRecords(t *testing.T) {
	ledger := newHeldLedger()
	h := newHarness(t, func(_ *Config, o *Options) { o.Ledger = ledger })
	defer ledger.free()
	if res, body := h.do(alice, "POST", completionPath(KindOpenAI), completionBody(KindOpenAI, true), nil); res.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", res.StatusCode, body)
	}
	<-ledger.adding
	closed := make(chan struct{})
	go func() {
		h.gw.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned with a usage record under way")
	case <-time.After(200 * time.Millisecond):
	}
	ledger.free()
	<-closed
	if n, _ := ledger.Spent(context.Background(), alice.UserID, KindOpenAI); n != 18 {
		t.Fatalf("ledger holds %d after Close, want 18", n)
	}
}
