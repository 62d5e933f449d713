package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// hopByHop are the headers that describe one connection rather than the message (RFC
// 9110 §7.6.1), with Proxy-Authorization and Proxy-Authenticate, which are the proxy's
// business and no upstream's; they are dropped both ways, with every header that
// Connection names. Host and the framing headers are dropped too: the proxy writes its
// own.
var hopByHop = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Proxy-Authorization": true, "Proxy-Authenticate": true,
}

// forward serves a plain HTTP request: decide and dial its target, send the request with
// its body re-framed, and pass the response back. It reports whether the client
// connection may carry another request.
func (p *Proxy) forward(ctx context.Context, x *exchange) (keepAlive bool) {
	req := x.req
	t, origin, err := parseAbsoluteURI(req.method, req.target)
	if err != nil {
		p.refuse(ctx, x, badRequest("egress.host", err))
		return false
	}
	x.ev.Host, x.ev.Port = t.host, t.port
	if ref := checkHostHeader(req, t); ref != nil {
		p.refuse(ctx, x, ref)
		return false
	}
	nup, ref := p.open(ctx, x, t, p.httpPorts)
	if ref != nil {
		p.refuse(ctx, x, ref)
		return false
	}
	defer nup.Close()
	stop := context.AfterFunc(ctx, func() { _ = nup.Close() })
	defer stop()
	x.ev.Stage, x.ev.Status = StageOpened, 0
	p.record(ctx, x.ev)
	p.m.open.Inc()
	defer p.m.open.Dec()

	act := &activity{}
	up := newConn(nup)
	up.setIdle(p.idleTimeout, act)
	x.client.setIdle(p.idleTimeout, act)
	defer x.client.setFixed(time.Time{})

	status, keepAlive := p.exchange(x, up, t, origin)
	x.ev.Stage, x.ev.Status = StageClosed, status
	x.ev.BytesOut, x.ev.BytesIn, x.ev.Duration = x.out.Load(), x.in.Load(), time.Since(x.start)
	p.record(ctx, x.ev)
	return keepAlive
}

// exchange sends the request upstream and the response back, and returns the status the
// client got and whether its connection may go on.
func (p *Proxy) exchange(x *exchange, up *conn, t target, origin string) (int, bool) {
	req := x.req
	body := req.body != nil
	if body && httpguts.HeaderValuesContainsToken(req.header["Expect"], "100-continue") {
		// The proxy is ready for the body; the upstream gets no Expect (the proxy does
		// not relay interim responses).
		if _, err := io.WriteString(x.client, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			return 0, false
		}
	}
	bw := bufio.NewWriterSize(up, 4<<10)
	if x.viaUpstream {
		origin = absoluteTarget(t, origin)
	}
	writeRequestHead(bw, req, t, origin, p.proxyAuthorizationFor(x))
	if err := bw.Flush(); err != nil {
		return p.badGateway(x, "sending the request to %s failed", t.host), false
	}
	sent := make(chan error, 1)
	if body {
		go func() { sent <- p.sendBody(x, up) }()
	} else {
		sent <- nil
	}

	up.limit = maxResponseHeaderBytes
	ubr := bufio.NewReaderSize(up, 16<<10)
	resp, err := nextResponse(ubr, req.method)
	up.limit = -1
	if err != nil {
		_ = up.Conn.Close()
		p.waitBody(x, sent)
		if isTimeout(err) {
			return p.gatewayError(x, http.StatusGatewayTimeout, "connection_read_timeout", "%s sent no response for %s", t.host, p.idleTimeout), false
		}
		return p.badGateway(x, "%s sent no valid response (%s)", t.host, printable(rootCause(err), 80)), false
	}
	// The client's connection goes on only if it asked to and the response can be framed
	// for it — and, checked at the end, if its request body was all read: an upstream
	// that answers before reading it all leaves the connection to be closed after the
	// response, which HTTP/1.1 clients expect of any connection.
	keep := !req.close
	bodyless := resp.body == nil && resp.contentLength < 0 // HEAD, 204, 304: headers pass as sent
	chunked := resp.body != nil && resp.contentLength < 0 && keep
	keep = keep && (bodyless || resp.contentLength >= 0 || chunked)

	cw := bufio.NewWriterSize(x.client, 4<<10)
	writeResponseHead(cw, resp, bodyless, chunked, keep)
	if err := cw.Flush(); err != nil {
		_ = up.Conn.Close()
		p.waitBody(x, sent)
		return resp.code, false
	}
	if resp.body != nil {
		if err := p.sendResponseBody(x, up, ubr, resp, chunked); err != nil {
			keep = false // the response is cut short; closing is how the client learns
		}
	}
	_ = up.Conn.Close()
	if !p.waitBody(x, sent) {
		keep = false
	}
	return resp.code, keep
}

// sendResponseBody copies the response body to the client: re-chunked when its length is
// unknown and the connection goes on, de-chunked when it ends with the body, and as raw
// bytes (spliced where possible) when the upstream did not chunk it.
func (p *Proxy) sendResponseBody(x *exchange, up *conn, ubr *bufio.Reader, resp *response, chunked bool) error {
	count := func(n int) { p.m.in.Add(float64(n)) }
	switch {
	case chunked:
		cw := httputil.NewChunkedWriter(x.client)
		if err := pipe(cw, resp.body, &x.in, count); err != nil {
			return err
		}
		if err := cw.Close(); err != nil {
			return err
		}
		_, err := io.WriteString(x.client, "\r\n")
		return err
	case resp.chunked:
		return pipe(x.client, resp.body, &x.in, count)
	}
	return copyBody(x.client, up, ubr, resp.contentLength, &x.in, count)
}

// waitBody waits for the request body's sender, and reports whether it sent it all. The
// upstream is closed by then, so a sender blocked writing there returns; one blocked
// reading a client that sends no more is given a moment, then the client is cut off.
func (p *Proxy) waitBody(x *exchange, sent chan error) bool {
	select {
	case err := <-sent:
		return err == nil
	case <-time.After(lingerTimeout):
		_ = x.client.Conn.Close()
		<-sent //nolint:errcheck // the sender is cut off: its error says only that
		return false
	}
}

// sendBody copies the request body upstream in the framing writeRequestHead announced.
func (p *Proxy) sendBody(x *exchange, up *conn) error {
	count := func(n int) { p.m.out.Add(float64(n)) }
	if x.req.contentLength > 0 {
		return copyBody(up, x.client, x.br, x.req.contentLength, &x.out, count)
	}
	cw := httputil.NewChunkedWriter(up)
	if err := pipe(cw, x.req.body, &x.out, count); err != nil {
		return err
	}
	if err := cw.Close(); err != nil {
		return err
	}
	_, err := io.WriteString(up, "\r\n")
	return err
}

// writeRequestHead writes the request line in origin form, the Host the proxy decided,
// the client's end-to-end headers and the proxy's own framing. The upstream connection
// carries this one request.
func writeRequestHead(w *bufio.Writer, req *request, t target, origin, proxyAuth string) {
	fmt.Fprintf(w, "%s %s HTTP/1.1\r\nHost: %s\r\n", req.method, origin, t.hostHeader(80))
	if proxyAuth != "" {
		w.WriteString("Proxy-Authorization: " + proxyAuth + "\r\n")
	}
	h := endToEnd(req.header)
	delete(h, "Host")
	delete(h, "Content-Length")
	delete(h, "Expect")
	_ = h.Write(w)
	switch {
	case req.contentLength > 0:
		w.WriteString("Content-Length: " + strconv.FormatInt(req.contentLength, 10) + "\r\n")
	case req.contentLength < 0:
		w.WriteString("Transfer-Encoding: chunked\r\n")
	case req.hasLength:
		w.WriteString("Content-Length: 0\r\n")
	}
	w.WriteString("Connection: close\r\n\r\n")
}

// writeResponseHead writes the upstream's status and end-to-end headers, framed for the
// client: Content-Length for a body of known length, chunked for one of unknown length,
// or the end of the connection. A response without a body (to HEAD, 204, 304) keeps the
// Content-Length the upstream sent, which describes what a GET would have had.
func writeResponseHead(w *bufio.Writer, resp *response, bodyless, chunked, keep bool) {
	w.WriteString("HTTP/1.1 " + resp.status + "\r\n")
	h := endToEnd(resp.header)
	if !bodyless {
		delete(h, "Content-Length")
	}
	_ = h.Write(w)
	switch {
	case bodyless:
	case resp.contentLength >= 0:
		w.WriteString("Content-Length: " + strconv.FormatInt(resp.contentLength, 10) + "\r\n")
	case chunked:
		w.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if !keep {
		w.WriteString("Connection: close\r\n")
	}
	w.WriteString("\r\n")
}

// endToEnd is a copy of h without the hop-by-hop headers and those Connection names.
func endToEnd(h http.Header) http.Header {
	named := map[string]bool{}
	for _, v := range h["Connection"] {
		for tok := range strings.SplitSeq(v, ",") {
			if tok = strings.TrimSpace(tok); tok != "" {
				named[http.CanonicalHeaderKey(tok)] = true
			}
		}
	}
	out := make(http.Header, len(h))
	for k, v := range h {
		if !hopByHop[k] && !named[k] {
			out[k] = v
		}
	}
	return out
}

// nextResponse reads the upstream's response, skipping interim (1xx) responses. A
// protocol switch is refused: the proxy dropped Upgrade, so none was asked for.
func nextResponse(br *bufio.Reader, method string) (*response, error) {
	for {
		resp, err := readResponse(br, method)
		if err != nil {
			return nil, err
		}
		switch {
		case resp.code == http.StatusSwitchingProtocols:
			return nil, errors.New("an unrequested protocol switch")
		case resp.code < 200:
			continue
		}
		return resp, nil
	}
}

// badGateway and gatewayError answer the client in the upstream's place when the
// exchange failed after it was allowed, and return the status given.
func (p *Proxy) badGateway(x *exchange, format string, args ...any) int {
	return p.gatewayError(x, http.StatusBadGateway, "http_protocol_error", format, args...)
}

func (p *Proxy) gatewayError(x *exchange, status int, proxyStatus, format string, args ...any) int {
	r := fail("egress.upstream", status, proxyStatus, format, args...)
	_ = x.client.Conn.SetWriteDeadline(time.Now().Add(p.headerTimeout))
	writeRefusal(x.client.Conn, r)
	p.log.Info("egress: upstream failed", "sandbox", x.ev.Sandbox, "id", x.ev.ID, "host", x.ev.Host, "reason", r.reason)
	return status
}
