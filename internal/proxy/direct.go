package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"time"
)

// directTransport exchanges a request that has no body with the app on a kept-alive
// connection, in the caller's goroutine: it writes the request, reads the answer's head,
// and hands back a body that returns the connection to its pool at EOF. http.Transport
// runs two goroutines per connection and hands each request and answer between them, which
// at saturation costs the control plane more CPU than the exchange itself. A request with a
// body (which must be written while the answer may already arrive), an Expect or trailers
// goes to fallback.
type directTransport struct {
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	fallback http.RoundTripper
	// maxIdle bounds the idle connections kept per sandbox; idleTimeout drops older ones.
	maxIdle     int
	idleTimeout time.Duration

	mu   sync.Mutex
	idle map[string][]*upConn // by sandbox ID, most recently used last
}

// max1xx bounds the informational answers before the final one, as http.Transport does.
const max1xx = 5

func newDirectTransport(dial func(ctx context.Context, network, addr string) (net.Conn, error), fallback http.RoundTripper) *directTransport {
	return &directTransport{dial: dial, fallback: fallback, maxIdle: 64, idleTimeout: 90 * time.Second, idle: map[string][]*upConn{}}
}

// upConn is one connection to an app, with its buffers.
type upConn struct {
	net.Conn
	host      string
	br        *bufio.Reader
	bw        *bufio.Writer
	headLeft  int64 // bytes the answer's head may still take; < 0 once the body is read
	idleSince time.Time
}

// errHeadTooLarge is an app's answer whose head exceeds maxResponseHeaderBytes.
var errHeadTooLarge = refusal("its response headers were too large")

// Read reads from the connection, bounding what an answer's head may take.
func (c *upConn) Read(p []byte) (int, error) {
	if c.headLeft == 0 {
		return 0, errHeadTooLarge
	}
	if c.headLeft > 0 && int64(len(p)) > c.headLeft {
		p = p[:c.headLeft]
	}
	n, err := c.Conn.Read(p)
	if c.headLeft > 0 {
		c.headLeft -= int64(n)
	}
	return n, err
}

// NewDirectTransport exchanges a request without a body, an upgrade, an Expect or
// trailers on a kept-alive connection to req.URL.Host in the caller's goroutine, as the
// proxy does with apps; any other request goes through fallback. For other hops of a
// request, such as the one between control-plane replicas.
func NewDirectTransport(dial func(ctx context.Context, network, addr string) (net.Conn, error), fallback http.RoundTripper) http.RoundTripper {
	return newDirectTransport(dial, fallback)
}

// direct reports whether req can be exchanged without http.Transport. An upgrade cannot:
// its answer's body must be the connection itself.
func direct(req *http.Request) bool {
	return (req.Body == nil || req.Body == http.NoBody) && req.ContentLength == 0 && len(req.TransferEncoding) == 0 &&
		req.Trailer == nil && req.URL.Scheme == "http" && req.Header.Get("Expect") == "" && !req.Close &&
		!upgrade(req)
}

// upgrade reports whether req asks to switch protocols.
func upgrade(req *http.Request) bool { return req.Header.Get("Upgrade") != "" }

// RoundTrip implements http.RoundTripper.
func (t *directTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !direct(req) {
		return t.fallback.RoundTrip(req)
	}
	var got1xx func(int, http.Header) error
	if trace := httptrace.ContextClientTrace(req.Context()); trace != nil && trace.Got1xxResponse != nil {
		got1xx = func(code int, h http.Header) error { return trace.Got1xxResponse(code, textproto.MIMEHeader(h)) }
	}
	return t.roundTrip(req, req.URL.Host, func(bw *bufio.Writer) error { return writeHead(bw, req) }, got1xx)
}

// roundTrip exchanges req with host: head writes the request's head, got1xx (when set)
// sees each informational answer. req gives the context, the method and whether a failure
// on a reused connection may be retried.
func (t *directTransport) roundTrip(req *http.Request, host string, head func(*bufio.Writer) error, got1xx func(int, http.Header) error) (*http.Response, error) {
	for {
		c, reused, err := t.get(req.Context(), host)
		if err != nil {
			return nil, err
		}
		res, answered, err := t.exchange(req, c, head, got1xx)
		if err == nil {
			return res, nil
		}
		c.Close()
		// A kept-alive connection the app closed while idle fails before any answer: an
		// idempotent request is sent again on a new one, as http.Transport does.
		if !reused || answered || !idempotent(req) || req.Context().Err() != nil {
			return nil, err
		}
	}
}

func idempotent(req *http.Request) bool {
	switch req.Method {
	case "GET", "HEAD", "OPTIONS", "TRACE":
		return true
	}
	return false
}

// get takes an idle connection to host, or dials one.
func (t *directTransport) get(ctx context.Context, host string) (*upConn, bool, error) {
	now := time.Now()
	t.mu.Lock()
	for list := t.idle[host]; len(list) > 0; list = t.idle[host] {
		c := list[len(list)-1]
		list[len(list)-1] = nil
		t.idle[host] = list[:len(list)-1]
		if now.Sub(c.idleSince) < t.idleTimeout {
			t.mu.Unlock()
			return c, true, nil
		}
		c.Close()
	}
	t.mu.Unlock()
	nc, err := t.dial(ctx, "tcp", host)
	if err != nil {
		return nil, false, err
	}
	c := &upConn{Conn: nc, host: host, headLeft: -1}
	c.br, c.bw = bufio.NewReaderSize(c, 4<<10), bufio.NewWriterSize(nc, 4<<10)
	return c, false, nil
}

// put keeps c for the next request to its host, or closes it.
func (t *directTransport) put(c *upConn) {
	c.idleSince = time.Now()
	t.mu.Lock()
	if list := t.idle[c.host]; len(list) < t.maxIdle {
		t.idle[c.host] = append(list, c)
		c = nil
	}
	t.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// forget closes the idle connections to host.
func (t *directTransport) forget(host string) {
	t.mu.Lock()
	list := t.idle[host]
	delete(t.idle, host)
	t.mu.Unlock()
	for _, c := range list {
		c.Close()
	}
}

// CloseIdleConnections closes every idle connection, the fallback's too.
func (t *directTransport) CloseIdleConnections() {
	t.mu.Lock()
	all := t.idle
	t.idle = map[string][]*upConn{}
	t.mu.Unlock()
	for _, list := range all {
		for _, c := range list {
			c.Close()
		}
	}
	if ci, ok := t.fallback.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// longAgo is a deadline that has passed: it wakes a blocked Read or Write at once.
var longAgo = time.Unix(1, 0)

// exchange sends req on c and reads the answer's head; answered says whether any byte of
// an answer arrived. The request's context ending cuts the connection's reads and writes.
func (t *directTransport) exchange(req *http.Request, c *upConn, head func(*bufio.Writer) error, got1xx func(int, http.Header) error) (*http.Response, bool, error) {
	stop := context.AfterFunc(req.Context(), func() { _ = c.SetDeadline(longAgo) })
	if err := head(c.bw); err != nil {
		stop()
		return nil, false, err
	}
	for n := 0; ; n++ {
		c.headLeft = maxResponseHeaderBytes
		res, err := http.ReadResponse(c.br, req)
		c.headLeft = -1
		if err != nil {
			stop()
			answered := c.br.Buffered() > 0 || !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !isReset(err)
			return nil, answered, err
		}
		if res.StatusCode >= 100 && res.StatusCode < 200 && res.StatusCode != http.StatusSwitchingProtocols {
			if n >= max1xx {
				stop()
				return nil, true, refusal("it sent too many informational responses")
			}
			if got1xx != nil {
				if err := got1xx(res.StatusCode, res.Header); err != nil {
					stop()
					return nil, true, err
				}
			}
			continue
		}
		b := &upBody{t: t, c: c, res: res, stop: stop}
		if res.Body == http.NoBody || res.Body == nil {
			b.finish(true)
			res.Body = http.NoBody
		} else {
			b.rc, res.Body = res.Body, b
		}
		return res, true, nil
	}
}

// maxResponseHeaderBytes bounds an answer's head, as the fallback's Transport does.
const maxResponseHeaderBytes = 1 << 20

// isReset reports a connection the app reset or closed under a write.
func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) || errors.Is(err, net.ErrClosed)
}

// writeHead writes req's request line and headers, which net/http's server has parsed and
// the proxy rewritten, and flushes them.
func writeHead(bw *bufio.Writer, req *http.Request) error {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	writeRequestLine(bw, req.Method, req.URL.RequestURI(), host)
	for k, vs := range req.Header {
		if k == "Host" || k == "Content-Length" || k == "Transfer-Encoding" || k == "Trailer" || !validHeaderName(k) {
			continue
		}
		for _, v := range vs {
			if v == "" && k == "User-Agent" {
				continue // ReverseProxy's way to send none
			}
			writeField(bw, k, v)
		}
	}
	bw.WriteString("\r\n")
	return bw.Flush()
}

// writeRequestLine writes a bodiless request's line, its Host and, for a method whose
// request has a body, a zero Content-Length.
func writeRequestLine(bw *bufio.Writer, method, uri, host string) {
	bw.WriteString(method)
	bw.WriteByte(' ')
	bw.WriteString(uri)
	bw.WriteString(" HTTP/1.1\r\n")
	writeField(bw, "Host", host)
	if method == "POST" || method == "PUT" || method == "PATCH" {
		bw.WriteString("Content-Length: 0\r\n")
	}
}

// writeField writes one header field; CR and LF in v become spaces.
func writeField(bw *bufio.Writer, k, v string) {
	bw.WriteString(k)
	bw.WriteString(": ")
	bw.WriteString(headerValue(v))
	bw.WriteString("\r\n")
}

// headerValue is v with CR and LF replaced by spaces, as http.Header.Write does.
func headerValue(v string) string {
	if strings.ContainsAny(v, "\r\n") {
		return strings.NewReplacer("\r", " ", "\n", " ").Replace(strings.TrimSpace(v))
	}
	return strings.TrimSpace(v)
}

func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if b := k[i]; b <= ' ' || b >= 0x7f || b == ':' {
			return false
		}
	}
	return true
}

// upBody is an answer's body; at its end the connection goes back to the pool, unless the
// answer or the request said to close it, or the request's context ended.
type upBody struct {
	t    *directTransport
	c    *upConn
	res  *http.Response
	rc   io.ReadCloser
	stop func() bool

	mu   sync.Mutex
	done bool
}

func (b *upBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return 0, fmt.Errorf("read of a closed response body: %w", net.ErrClosed)
	}
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.finish(true)
	} else if err != nil {
		b.finish(false)
	}
	return n, err
}

// Close ends the body; before its end, the connection is closed, not drained.
func (b *upBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.done {
		b.finish(false)
	}
	return nil
}

// finish releases the connection once: to the pool after a complete answer that may be
// followed by another, else closed.
func (b *upBody) finish(complete bool) {
	b.done = true
	live := b.stop()
	if complete && live && !b.res.Close && b.res.StatusCode != http.StatusSwitchingProtocols && b.c.br.Buffered() == 0 {
		b.t.put(b.c)
		return
	}
	b.c.Close()
}
