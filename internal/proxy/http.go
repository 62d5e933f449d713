package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/httpmetrics"
)

// newTransport returns the one Transport every sandbox shares. Outbound URLs carry the
// sandbox ID as their host, so the pool is kept per sandbox and DialContext knows whose
// Dial to call.
func (p *Proxy) newTransport() *http.Transport {
	return &http.Transport{
		DialContext:            p.dialSandbox,
		MaxIdleConns:           1024,
		MaxIdleConnsPerHost:    64,
		IdleConnTimeout:        90 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 1 << 20,
		// Bytes pass through as the app sent them; decompressing would also defeat
		// streaming.
		DisableCompression: true,
	}
}

// dialSandbox opens a stream to the sandbox named by addr's host, and tracks it so that
// SandboxGone can drop it.
func (p *Proxy) dialSandbox(ctx context.Context, _, addr string) (net.Conn, error) {
	id, _, err := net.SplitHostPort(addr)
	if err != nil {
		id = addr
	}
	d, ok := p.dialers.Load(id)
	if !ok {
		return nil, fmt.Errorf("sandbox %s: no route: %w", id, errdefs.ErrUnavailable)
	}
	c, err := d.(func(context.Context) (net.Conn, error))(ctx)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	return p.reg.track(id, c), nil
}

func (p *Proxy) newReverseProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite:   p.rewrite,
		Transport: p.direct,
		// 0, not -1: ReverseProxy flushes every write of an SSE stream or a body of unknown
		// length (chunked: a stream) by itself. A body of known length goes out as the
		// server's buffer fills and at its end: a flush per read (a ResponseController call,
		// a lock and often a write) would cost throughput (make bench's table 5).
		FlushInterval:  0,
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.upstreamError,
		BufferPool:     bufferPool{},
		ErrorLog:       slog.NewLogLogger(p.log.Handler(), slog.LevelWarn),
	}
}

// bufferPool reuses ReverseProxy's copy buffers, which it would otherwise allocate
// (32 KiB) for every response.
type bufferPool struct{}

// BufferPool is the proxy's pool of ReverseProxy's copy buffers, for other reverse proxies.
func BufferPool() httputil.BufferPool { return bufferPool{} }

var copyBuffers = sync.Pool{New: func() any { return new([32 << 10]byte) }}

func (bufferPool) Get() []byte { return copyBuffers.Get().(*[32 << 10]byte)[:] }
func (bufferPool) Put(b []byte) {
	if len(b) == 32<<10 {
		copyBuffers.Put((*[32 << 10]byte)(b))
	}
}

// serveHTTP forwards one plain HTTP request.
func (p *Proxy) serveHTTP(w http.ResponseWriter, r *http.Request, info *reqInfo) {
	start := time.Now()
	sw := &httpmetrics.StatusWriter{ResponseWriter: w, Informational: scrubInformational}
	defer func() {
		p.m.request(info.caller.Role, sw.Status())
		p.m.duration.WithLabelValues(info.caller.Role).Observe(time.Since(start).Seconds())
	}()
	// A plain request skips ReverseProxy, unless a benchmark put http.Transport in place
	// of the direct path.
	if p.rp.Transport == p.direct && plain(r) {
		p.servePlain(sw, r, info)
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), infoKey{}, info))
	p.rp.ServeHTTP(sw, r)
}

// rewrite points the outbound request at the owner and scrubs it. The Host header is
// kept, so the app builds the same absolute URLs and origin checks the browser does.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	info := infoFrom(pr.In.Context())
	pr.SetURL(&url.URL{Scheme: "http", Host: info.target.SandboxID})
	pr.Out.Host = pr.In.Host
	scrubRequest(pr.Out.Header, p.isReserved)
	pr.SetXForwarded()
	stampRequest(pr.Out.Header, info)
}

// modifyResponse scrubs what the app answered before the client sees it.
func (p *Proxy) modifyResponse(res *http.Response) error {
	info := infoFrom(res.Request.Context())
	if res.StatusCode == http.StatusSwitchingProtocols {
		// Upgrades go through serveWebSocket; a 101 here would turn a plain request
		// into a raw tunnel.
		return refusal("it switched protocols on a request that asked for no upgrade")
	}
	p.scrubResponse(res.Header, info)
	if res.Body != nil && res.Body != http.NoBody {
		res.Body = &trailerScrub{ReadCloser: res.Body, res: res, p: p, info: info}
	}
	stampResponse(res.Header, info)
	return nil
}

// scrubResponse drops the app's X-Paddock-* headers (only the proxy speaks for the
// control plane) and its Set-Cookies that name a reserved cookie.
func (p *Proxy) scrubResponse(h http.Header, info *reqInfo) {
	for k := range h {
		if hasPrefixFold(k, "X-Paddock-") {
			delete(h, k)
		}
	}
	for _, name := range dropReservedSetCookies(h, p.isReserved) {
		p.log.Warn("proxy: dropped a Set-Cookie for a reserved cookie from a sandbox",
			"user", info.caller.UserID, "sandbox", info.target.SandboxID, "role", info.caller.Role, "cookie", errdefs.Clip(name, 64))
	}
}

// trailerScrub applies scrubResponse to trailers too, which arrive with the body's end.
type trailerScrub struct {
	io.ReadCloser
	res  *http.Response
	p    *Proxy
	info *reqInfo
}

func (t *trailerScrub) Read(b []byte) (int, error) {
	n, err := t.ReadCloser.Read(b)
	if err == io.EOF && len(t.res.Trailer) > 0 {
		t.p.scrubResponse(t.res.Trailer, t.info)
	}
	return n, err
}

// upstreamError answers a request the owner did not answer: 502, naming role and
// sandbox, and never anything served in the app's place.
func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	p.answerUnreachable(w, r, infoFrom(r.Context()), err)
}

// answerUnreachable is upstreamError for a request whose reqInfo is at hand.
func (p *Proxy) answerUnreachable(w http.ResponseWriter, r *http.Request, info *reqInfo, err error) {
	if r.Context().Err() != nil {
		// The client left; nobody reads this answer.
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	p.m.upstreamErrors.WithLabelValues(info.caller.Role).Inc()
	p.log.Warn("proxy: sandbox not answering", "user", info.caller.UserID, "role", info.caller.Role,
		"sandbox", info.target.SandboxID, "method", r.Method, "path", errdefs.Clip(r.URL.Path, 64), "err", err)
	stampResponse(w.Header(), info)
	if r.Method == http.MethodGet && isPage(r) {
		// A page (a tab, the desktop's preview frame) tries again by itself: an app that
		// is restarting (after an undo) is back within seconds.
		w.Header().Set("Refresh", pageRetrySeconds)
	}
	api.WriteErrorCode(w, http.StatusBadGateway, api.CodeUnavailable, unavailableMessage(info, err))
}

// pageRetrySeconds is how soon a page that found the app not answering loads again.
const pageRetrySeconds = "2"

// isPage reports a request for a document, top-level or in a frame.
func isPage(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Dest") {
	case "document", "iframe", "frame":
		return true
	}
	return false
}

func unavailableMessage(info *reqInfo, err error) string {
	return fmt.Sprintf("the %s sandbox %s is not answering: %s; check that its app is running, or retry shortly",
		info.caller.Role, info.target.SandboxID, describe(err))
}

// describe says what went wrong with an upstream in words that carry no internal
// address or state; the log has the full error.
func describe(err error) string {
	var ne net.Error
	var rf refusal
	switch {
	case errors.As(err, &rf):
		return string(rf)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the connection closed before a response"
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return "timed out"
	case errors.Is(err, errdefs.ErrUnavailable):
		return "it is not reachable"
	}
	return "it gave no valid response"
}

// scrubInformational scrubs a 1xx response's headers, which ReverseProxy copies from the
// app straight to the client: no cookies, none of paddock's own headers.
func scrubInformational(h http.Header) {
	h.Del("Set-Cookie")
	for k := range h {
		if hasPrefixFold(k, "X-Paddock-") {
			delete(h, k)
		}
	}
}

// refusal is an app's answer the proxy will not pass on; its text is safe to show.
type refusal string

func (r refusal) Error() string { return string(r) }

// Is places a refusal in the taxonomy: the sandbox did not give a usable answer.
func (refusal) Is(target error) bool { return target == errdefs.ErrUnavailable }
