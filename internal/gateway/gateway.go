// Package gateway is the provider gateway: the way sandboxes reach LLM providers (the
// OpenAI API and servers compatible with it, Anthropic's Messages API) without ever holding
// the platform's keys (ADR-0003: platform secrets stay in the control plane). A sandbox is
// given a base URL on the control plane, OPENAI_BASE_URL=…/gateway/openai/v1 or
// ANTHROPIC_BASE_URL=…/gateway/anthropic, and any key it likes; the gateway drops whatever
// credential the sandbox sent, puts the platform key in, forwards the request to the
// provider and passes the answer back as it arrives, streamed answers (server-sent
// events) chunk by chunk with no buffering. On the way it reads the token usage the
// provider reports, counts it per user and sandbox, and enforces each provider's per-user
// limits: requests per minute and tokens per day.
//
// Threat model: the sandbox is hostile. It may send any header, path, query and body. It
// must not learn a platform key (from a forwarded response, an error message, a log line,
// a metric or a redirect), must not choose which key or which of the platform's
// organizations pays (its credential headers, OpenAI-Organization and OpenAI-Project are
// dropped), must not reach a path outside the provider's base URL (dot segments and
// encoded slashes are refused), must not spend beyond its user's limits, and must not
// pose as another user: the caller's identity comes only from the request's context, put
// there by the control plane from the channel the request arrived on (see [WithCaller]),
// never from anything the sandbox wrote. The providers are trusted to answer, not to
// behave: what they send is parsed for usage with bounded memory, never buffered whole,
// and a provider that echoes the key in a header or an error body has it removed.
//
// What it does not do yet: the budget is checked when a request starts, so requests
// already under way can take a user past it; an answer that does not reach its end is
// charged an estimate (see estimate), not what the provider bills; only GET and POST are
// forwarded. Budgets live in the Ledger given in Options (the control plane keeps them in
// its store; the default, [MemoryLedger], loses them at a restart).
package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/httpmetrics"
)

// Caller is the sandbox a request came from, and the user it belongs to.
type Caller struct {
	UserID    string
	SandboxID string
}

type callerKey struct{}

// WithCaller returns ctx carrying c. The control plane calls it with the identity of the
// channel a request arrived on (the sandbox's own agent channel); the gateway believes
// nothing else about who is asking.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the Caller that WithCaller put in ctx.
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// Usage is what one request used, as the provider reported it. InputTokens include
// Anthropic's prompt-cache reads and writes.
type Usage struct {
	Caller       Caller
	Provider     string
	Model        string
	InputTokens  int64
	OutputTokens int64
	// Estimated is set when the answer did not reach its end (the client left, or the
	// provider broke off) before the provider said what it used: the counts are then the
	// gateway's estimate (see estimate), so that leaving early is not a way around budgets.
	Estimated bool
}

// Options configure a [Gateway]. The zero value works.
type Options struct {
	// Log is where the gateway logs; nil uses slog.Default(). No key reaches it.
	Log *slog.Logger
	// Registerer receives the gateway's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Usage, when set, is called once for every answer that reported tokens, after the
	// client has the answer's end and the ledger has counted it, off the request's
	// goroutine. Its context is the request's, never canceled.
	Usage func(ctx context.Context, u Usage)
	// Client sends requests to the providers; nil uses one with sane timeouts. The gateway
	// never follows redirects with it (a redirect would carry the key elsewhere).
	Client *http.Client
	// Now reads the clock for limits and budgets; nil is time.Now.
	Now func() time.Time
	// Ledger keeps the users' daily token counts; nil is a NewMemoryLedger(Now).
	Ledger Ledger
	// Rates keeps the users' request buckets; nil keeps them in memory.
	Rates Rates
}

// Gateway forwards sandboxes' requests to LLM providers with the platform's keys. It is
// an http.Handler for paths /{provider}/{rest…}; mount it with http.StripPrefix. Its
// methods are safe for concurrent use.
type Gateway struct {
	providers map[string]*provider
	names     []string // sorted, for messages
	maxBody   int64
	client    *http.Client
	log       *slog.Logger
	m         *metrics
	usage     func(context.Context, Usage)
	now       func() time.Time
	ledger    Ledger
	limiter   Rates
	records   records
}

// provider is a Provider ready to serve: its URL parsed and its key read.
type provider struct {
	name, kind string
	base       *url.URL
	// key is a pointer so that printing a provider (%#v skips the methods of unexported
	// fields) shows an address, not the key.
	key *Secret
	rpm int
	tpd int64
}

// New validates cfg, reads every provider's key and returns a Gateway. Its errors name
// the configuration field at fault and never hold a key.
func New(cfg Config, opts Options) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Ledger == nil {
		opts.Ledger = NewMemoryLedger(opts.Now)
	}
	if opts.Rates == nil {
		opts.Rates = newRateLimiter()
	}
	g := &Gateway{
		providers: map[string]*provider{},
		maxBody:   cfg.MaxRequestBytes,
		log:       opts.Log,
		usage:     opts.Usage,
		now:       opts.Now,
		ledger:    opts.Ledger,
		limiter:   opts.Rates,
		client:    noRedirects(opts.Client),
	}
	if g.maxBody == 0 {
		g.maxBody = DefaultMaxRequestBytes
	}
	for i, p := range cfg.Providers {
		key, err := resolveKey(p, i, opts.Log)
		if err != nil {
			return nil, err
		}
		base, _ := parseBaseURL(p.BaseURL) // Validate checked it
		g.providers[p.Name] = &provider{name: p.Name, kind: p.Kind, base: base, key: &key,
			rpm: p.RequestsPerMinute, tpd: p.TokensPerDay}
		g.names = append(g.names, p.Name)
	}
	slices.Sort(g.names)
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	g.m = m
	return g, nil
}

// noRedirects returns a copy of c (or of a default client) that hands redirects back
// instead of following them: Go drops Authorization on a redirect to another host, but
// not x-api-key.
func noRedirects(c *http.Client) *http.Client {
	if c == nil {
		c = &http.Client{Transport: defaultTransport()}
	}
	cc := *c
	cc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cc
}

func defaultTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		// A long completion that is not streamed sends its headers only when it is done.
		ResponseHeaderTimeout:  10 * time.Minute,
		MaxResponseHeaderBytes: 1 << 20,
	}
}

// Close waits for the usage records under way to reach the ledger; call it once the
// gateway serves no more requests, before the ledger's store closes. Answers that end
// after it are recorded before their handler returns.
func (g *Gateway) Close() { g.records.close() }

// Providers returns the configured provider names, sorted.
func (g *Gateway) Providers() []string { return slices.Clone(g.names) }

// ServeHTTP forwards /{provider}/{rest…} to that provider's base URL + /{rest…}, with the
// query, as the caller in r's context.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	name, rest := splitProvider(r.URL.EscapedPath())
	p := g.providers[name]
	label, kind := unknownProvider, ""
	if p != nil {
		label, kind = p.name, p.kind
	}
	sw := &httpmetrics.StatusWriter{ResponseWriter: w}
	defer func() {
		g.m.request(label, sw.Status())
		g.m.duration.WithLabelValues(label).Observe(time.Since(start).Seconds())
	}()
	c, ok := CallerFrom(r.Context())
	if !ok || c.UserID == "" {
		g.log.Error("gateway: a request arrived without a caller; the control plane must set one with gateway.WithCaller",
			"method", r.Method, "path", errdefs.Clip(r.URL.Path, 64))
		writeRefusal(sw, kind, refuse(http.StatusForbidden, errdefs.ErrPermissionDenied,
			"the provider gateway does not know which sandbox sent this request; it serves only requests that arrive on a sandbox's own channel"))
		return
	}
	if p == nil {
		writeRefusal(sw, "", g.notFound(name))
		return
	}
	if ref := g.forward(sw, r, p, c, rest); ref != nil {
		if ref.status == http.StatusTooManyRequests || ref.status >= 500 {
			g.log.Info("gateway: refused", "provider", p.name, "user", c.UserID, "sandbox", c.SandboxID,
				"status", ref.status, "reason", ref.msg)
		}
		writeRefusal(sw, p.kind, ref)
	}
}

// splitProvider splits "/openai/v1/chat" into "openai" and "/v1/chat".
func splitProvider(path string) (name, rest string) {
	name, rest, found := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	if found {
		rest = "/" + rest
	}
	return name, rest
}

func (g *Gateway) notFound(name string) *refusal {
	if len(g.names) == 0 {
		return refuse(http.StatusNotFound, errdefs.ErrNotFound,
			"provider %q is not configured: no providers are (gateway.providers in the server's configuration is empty)", errdefs.Clip(name, 64))
	}
	return refuse(http.StatusNotFound, errdefs.ErrNotFound,
		"provider %q is not configured; the gateway serves %s, each under /gateway/{provider}/", errdefs.Clip(name, 64), strings.Join(g.names, ", "))
}

// forward checks r, sends it upstream and relays the answer. It returns a refusal to
// answer in the provider's place, or nil once it has answered.
func (g *Gateway) forward(w *httpmetrics.StatusWriter, r *http.Request, p *provider, c Caller, rest string) *refusal {
	if r.Method != http.MethodPost && r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET, POST")
		return refuse(http.StatusMethodNotAllowed, errdefs.ErrInvalidArgument,
			"the provider gateway forwards GET and POST only, not %s", errdefs.Clip(r.Method, 64))
	}
	path, rawPath, err := upstreamPath(p.base, rest)
	if err != nil {
		return refuse(http.StatusBadRequest, errdefs.ErrInvalidArgument, "%s", strings.TrimSuffix(err.Error(), ": "+errdefs.ErrInvalidArgument.Error()))
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		// The gateway reads the body (the model; OpenAI's stream options); a compressed
		// one would also be a way around usage accounting.
		return refuse(http.StatusBadRequest, errdefs.ErrInvalidArgument,
			"Content-Encoding %q: the provider gateway takes uncompressed request bodies only", errdefs.Clip(ce, 64))
	}
	body, ref := g.readBody(w.ResponseWriter, r) // unwrapped: MaxBytesReader closes the connection through it
	if ref != nil {
		return ref
	}
	info, body := inspect(p.kind, path, body)
	info.bodyBytes = len(body)
	if ref := g.admit(r.Context(), p, c); ref != nil {
		return ref
	}
	u := *p.base
	u.Path, u.RawPath, u.RawQuery = path, rawPath, filterQuery(r.URL.RawQuery)
	var rd io.Reader
	if len(body) > 0 {
		rd = bytes.NewReader(body)
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, u.String(), rd)
	if err != nil {
		return refuse(http.StatusBadRequest, errdefs.ErrInvalidArgument, "the request cannot be forwarded: its path or query is malformed")
	}
	out.Header = outboundHeader(r.Header, p)
	sent := time.Now()
	res, err := g.client.Do(out)
	if err != nil {
		if r.Context().Err() != nil {
			// The client left before the answer began: the provider may well have read
			// the prompt (and, unstreamed, generated the answer) all the same.
			g.account(r.Context(), p, c, info.model, estimate(tokens{}, info, 0), true)
		}
		return g.unreachable(r, p, c, err)
	}
	defer res.Body.Close()
	g.m.upstream.WithLabelValues(p.name).Observe(time.Since(sent).Seconds())
	switch {
	case res.StatusCode == http.StatusUnauthorized:
		g.log.Error("gateway: the provider refused the platform's key; fix the key in the gateway's configuration",
			"provider", p.name, "status", res.StatusCode)
		return refuse(http.StatusBadGateway, errdefs.ErrUnavailable,
			"provider %q refused the platform's key (it answered 401); only the operator can fix that, so retrying will not help", p.name)
	case res.StatusCode >= 400:
		g.relayError(w, res, p)
	default:
		g.relay(w, r, res, p, c, info)
	}
	return nil
}

// readBody reads the whole request body, up to the limit: the gateway needs it whole to
// read the model and stream flag before it forwards (prompts are small next to answers).
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *refusal) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	tooLarge := refuse(http.StatusRequestEntityTooLarge, api.ErrTooLarge,
		"the request body is over the provider gateway's limit of %d bytes%s; send less (fewer or smaller images and files), or ask the operator to raise gateway.max_request_bytes",
		g.maxBody, inMiB(g.maxBody))
	if r.ContentLength > g.maxBody {
		return nil, tooLarge
	}
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength))
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, g.maxBody))
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		return nil, tooLarge
	}
	if err != nil {
		return nil, refuse(http.StatusBadRequest, errdefs.ErrInvalidArgument, "the request body could not be read to its end")
	}
	return buf.Bytes(), nil
}

// inMiB is " (n MiB)" for a whole number of MiB, else "".
func inMiB(n int64) string {
	if n < 1<<20 || n%(1<<20) != 0 {
		return ""
	}
	return fmt.Sprintf(" (%d MiB)", n>>20)
}

// requestInfo is what the gateway reads from a request body.
type requestInfo struct {
	model     string
	stream    bool
	bodyBytes int // as sent upstream
}

// inspect reads the model and stream flag of a JSON request body. For an OpenAI stream it
// also sets stream_options.include_usage, so that the provider ends the stream with a
// chunk that reports usage: without it a streamed completion would go uncounted and
// budgets could be streamed around. The client then sees that extra final chunk (empty
// choices, a usage) as if it had asked for it, which OpenAI's SDKs expect. The body is
// re-encoded only then, its top-level keys sorted and every value byte for byte. A body
// that is not a JSON object goes upstream as it is, and the provider refuses it. Only
// chat and legacy completions take include_usage: the Responses API refuses it as an
// unknown parameter, and its stream reports usage in response.completed anyway.
func inspect(kind, path string, body []byte) (requestInfo, []byte) {
	var info requestInfo
	if len(body) == 0 {
		return info, body
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return info, body
	}
	_ = json.Unmarshal(top["model"], &info.model)
	info.model = errdefs.Clip(info.model, 64)
	info.stream = string(top["stream"]) == "true"
	if kind != KindOpenAI || !info.stream || !strings.HasSuffix(path, "/completions") {
		return info, body
	}
	opts := map[string]json.RawMessage{}
	if raw, ok := top["stream_options"]; ok && string(raw) != "null" {
		if json.Unmarshal(raw, &opts) != nil {
			return info, body // not an object: the provider will say so
		}
	}
	if string(opts["include_usage"]) == "true" {
		return info, body
	}
	opts["include_usage"] = json.RawMessage("true")
	top["stream_options"] = mustMarshal(opts)
	return info, mustMarshal(top)
}

// mustMarshal encodes maps of raw JSON that came from json.Unmarshal, which cannot fail;
// HTML characters in the client's strings stay as they were.
func mustMarshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'})
}

// admit checks c's limits on p: the daily token budget, then the request rate (a request
// refused for its budget does not spend a request of the minute).
func (g *Gateway) admit(ctx context.Context, p *provider, c Caller) *refusal {
	now := g.now()
	if p.tpd > 0 {
		// The user's previous answers on p count before this one is admitted.
		if err := g.records.wait(ctx, ledgerKey{c.UserID, p.name}); err != nil {
			return refuse(499, context.Canceled, "the client closed the request")
		}
		spent, err := g.ledger.Spent(ctx, c.UserID, p.name)
		if err != nil {
			g.log.Error("gateway: reading the token ledger", "provider", p.name, "user", c.UserID, "err", err)
			return refuse(http.StatusServiceUnavailable, errdefs.ErrUnavailable,
				"the token budget for provider %q cannot be checked right now; retry shortly", p.name)
		}
		if spent >= p.tpd {
			reset := nextMidnight(now)
			ref := refuse(http.StatusTooManyRequests, errdefs.ErrLimitExceeded,
				"tokens per day limit reached: your user has used %d of its %d tokens per day on provider %q; the budget resets at 00:00 UTC (%s, in %s)",
				spent, p.tpd, p.name, reset.Format(time.RFC3339), reset.Sub(now).Round(time.Second))
			ref.retryAfter = reset.Sub(now)
			return ref
		}
	}
	if p.rpm > 0 {
		ok, wait, err := g.limiter.Take(ctx, c.UserID, p.name, p.rpm, now)
		if err != nil {
			g.log.Error("gateway: reading the request rate", "provider", p.name, "user", c.UserID, "err", err)
			return refuse(http.StatusServiceUnavailable, errdefs.ErrUnavailable,
				"the request rate for provider %q cannot be checked right now; retry shortly", p.name)
		}
		if !ok {
			ref := refuse(http.StatusTooManyRequests, errdefs.ErrLimitExceeded,
				"requests per minute limit reached: provider %q allows each user %d requests per minute; the next one is allowed in %s",
				p.name, p.rpm, wait.Round(time.Millisecond))
			ref.retryAfter = wait
			return ref
		}
	}
	return nil
}

// unreachable answers a request the provider did not answer: 502, naming the provider
// and what went wrong in words that hold no address, key or raw error.
func (g *Gateway) unreachable(r *http.Request, p *provider, c Caller, err error) *refusal {
	if r.Context().Err() != nil {
		// The client left first; nobody reads the answer.
		return refuse(499, context.Canceled, "the client closed the request")
	}
	g.log.Warn("gateway: provider not reachable", "provider", p.name, "user", c.UserID, "sandbox", c.SandboxID,
		"err", redact(err.Error(), *p.key))
	return refuse(http.StatusBadGateway, errdefs.ErrUnavailable,
		"provider %q is not reachable from paddock (%s); retry shortly, and if it lasts ask the operator to check the gateway's base_url for it",
		p.name, describe(err))
}

// describe says what went wrong with an upstream request, without its text.
func describe(err error) string {
	var (
		ne  net.Error
		dns *net.DNSError
		cv  *tls.CertificateVerificationError
		rh  tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &dns):
		return "its host name does not resolve"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.As(err, &cv), errors.As(err, &rh):
		return "its TLS certificate or handshake is not valid"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the connection closed before a response"
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return "timed out"
	}
	return "no valid response"
}

// redact replaces the key in s, for log lines built from errors of the transport (which
// should never hold it, but a misconfiguration could put it in a URL).
func redact(s string, key Secret) string {
	if key == "" {
		return s
	}
	return strings.ReplaceAll(s, key.Reveal(), redacted)
}

// maxErrorBody bounds a provider's error body, which the gateway reads whole to take any
// echo of the key out of it; the rest of a longer one is dropped. Real ones are a few
// hundred bytes.
const maxErrorBody = 64 << 10

// relayError passes on a provider's error answer (4xx, 5xx), with any occurrence of the
// key removed; errors are small and not streamed, so it reads the body first.
func (g *Gateway) relayError(w *httpmetrics.StatusWriter, res *http.Response, p *provider) {
	b, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	if key := p.key.Reveal(); bytes.Contains(b, []byte(key)) {
		g.log.Warn("gateway: the provider echoed the platform's key in an error; removed it", "provider", p.name, "status", res.StatusCode)
		b = bytes.ReplaceAll(b, []byte(key), []byte(redacted))
	}
	g.copyHeader(w, res, p)
	w.Header().Del("Content-Length")
	w.WriteHeader(res.StatusCode)
	_, _ = w.Write(b)
}

func (g *Gateway) copyHeader(w http.ResponseWriter, res *http.Response, p *provider) {
	for _, k := range copyResponseHeader(w.Header(), res.Header, *p.key) {
		g.log.Warn("gateway: the provider echoed the platform's key in a response header; dropped it", "provider", p.name, "header", k)
	}
}

// copyBuffers are relay's read buffers.
var copyBuffers = sync.Pool{New: func() any { return new([32 << 10]byte) }}

// relay passes a provider's answer to the client as it arrives, flushing after every
// read, and meters its usage from a copy of each chunk after the client has it.
func (g *Gateway) relay(w *httpmetrics.StatusWriter, r *http.Request, res *http.Response, p *provider, c Caller, info requestInfo) {
	g.copyHeader(w, res, p)
	m := newMeter(res.Header.Get("Content-Type"))
	w.WriteHeader(res.StatusCode)
	rc := http.NewResponseController(w)
	_ = rc.Flush() // the client sees the answer start before its first token
	buf := copyBuffers.Get().(*[32 << 10]byte)
	defer copyBuffers.Put(buf)
	var readErr, writeErr error
	complete := false
	for {
		n, err := res.Body.Read(buf[:])
		if n > 0 {
			if _, writeErr = w.Write(buf[:n]); writeErr == nil {
				writeErr = rc.Flush()
			}
			if m != nil {
				_, _ = m.Write(buf[:n])
			}
		}
		if err != nil || writeErr != nil {
			if err != io.EOF {
				readErr = err
			}
			complete = err == io.EOF && writeErr == nil
			break
		}
	}
	var t tokens
	var events int64
	if m != nil {
		t, events = m.tokens(), m.events()
		// A client that leaves as soon as it has the last event (Codex does) races the
		// stream's own end; the provider's count is complete all the same.
		complete = complete || m.finished()
	}
	if complete {
		g.account(r.Context(), p, c, info.model, t, false)
	} else {
		g.account(r.Context(), p, c, info.model, estimate(t, info, events), true)
	}
	g.log.Debug("gateway: request", "provider", p.name, "user", c.UserID, "sandbox", c.SandboxID,
		"method", r.Method, "path", errdefs.Clip(r.URL.Path, 64), "model", info.model, "stream", info.stream,
		"status", res.StatusCode, "input_tokens", t.in, "output_tokens", t.out)
	if readErr != nil && writeErr == nil && r.Context().Err() == nil {
		g.log.Warn("gateway: the provider's answer broke off", "provider", p.name, "user", c.UserID,
			"sandbox", c.SandboxID, "err", redact(readErr.Error(), *p.key))
		// End the response without its terminating chunk, so the client sees a truncated
		// answer rather than a complete one.
		panic(http.ErrAbortHandler)
	}
}

// meter reads usage from an answer fed to it in pieces.
type meter interface {
	io.Writer
	tokens() tokens
	// events counts the server-sent events that carried data (0 for other answers).
	events() int64
	// finished reports whether the stream's last event, the one after its final usage,
	// has passed: a client that leaves then read the whole answer.
	finished() bool
}

// estimate is what an answer that did not reach its end is charged: the provider's own
// counts so far (an Anthropic stream gives the input at its start), but at least a token
// for every 4 bytes of the request as sent (the prompt, with its JSON around it) and a
// token for every streamed event the client was sent (OpenAI and Anthropic stream about a
// token per delta). Without it a client could read an answer and leave just before the
// last chunk, the one that carries the usage, and spend without limit.
func estimate(t tokens, info requestInfo, events int64) tokens {
	t.in = max(t.in, int64(info.bodyBytes+3)/4)
	t.out = max(t.out, events)
	return t
}

// newMeter picks the parser for an answer's content type: server-sent events or JSON.
// Other answers (audio, files) report no tokens.
func newMeter(contentType string) meter {
	mt, _, _ := mime.ParseMediaType(contentType)
	switch {
	case mt == "text/event-stream":
		return &sseParser{}
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return &usageScanner{}
	}
	return nil
}

// account counts what an answer used (estimated, or as the provider said): metrics, then,
// in the background, the ledger and the Usage sink. The ledger is the control plane's
// store, a write that can take milliseconds: written in line it would hold back the end
// of the answer, and the client's next request would find the connection still busy. The
// user's next budget check waits for it (see admit), and Close for all of them.
func (g *Gateway) account(ctx context.Context, p *provider, c Caller, model string, t tokens, estimated bool) {
	if t.in == 0 && t.out == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	g.m.used(p.name, t)
	g.records.start(ledgerKey{c.UserID, p.name}, func() {
		if err := g.ledger.Add(ctx, c.UserID, p.name, t.total()); err != nil {
			g.log.Error("gateway: recording tokens in the ledger", "provider", p.name, "user", c.UserID, "tokens", t.total(), "err", err)
		}
		if g.usage != nil {
			g.usage(ctx, Usage{Caller: c, Provider: p.name, Model: model, InputTokens: t.in, OutputTokens: t.out, Estimated: estimated})
		}
	})
}

// String keeps a provider's key out of %v.
func (p *provider) String() string {
	return fmt.Sprintf("provider %s (%s, %s)", p.name, p.kind, p.base.Redacted())
}
