package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// Why a WebSocket closed: the reason label of paddock_proxy_websocket_closes_total.
const (
	reasonOwnerChanged  = "owner_changed"
	reasonOwnerGone     = "owner_gone"
	reasonShutdown      = "shutdown"
	reasonClient        = "client_closed"
	reasonUpstream      = "upstream_closed"
	reasonClientError   = "client_error"
	reasonUpstreamError = "upstream_error"
)

// dialTimeout bounds the WebSocket handshake with the app.
const dialTimeout = 30 * time.Second

// serveWebSocket terminates a WebSocket at the proxy and relays it to the owner. The
// proxy holds both ends, so it can close the client's with a code it chooses when the
// owner changes, instead of a bare TCP reset that a client cannot tell from a crash.
func (p *Proxy) serveWebSocket(w http.ResponseWriter, r *http.Request, info *reqInfo, gen int64) {
	role := info.caller.Role
	up, err := p.dialUpstream(r, info)
	if err != nil {
		p.m.upstreamErrors.WithLabelValues(role).Inc()
		p.log.Warn("proxy: sandbox refused a WebSocket", "user", info.caller.UserID, "role", role,
			"sandbox", info.target.SandboxID, "path", errdefs.Clip(r.URL.Path, 64), "err", err)
		stampResponse(w.Header(), info)
		api.WriteErrorCode(w, http.StatusBadGateway, api.CodeUnavailable, unavailableMessage(info, err))
		p.m.request(role, http.StatusBadGateway)
		return
	}
	client, err := p.accept(w, r, info, up)
	if err != nil {
		_ = up.Close(websocket.StatusGoingAway, "the client's handshake failed")
		p.m.request(role, http.StatusBadRequest)
		return
	}
	p.m.request(role, http.StatusSwitchingProtocols)
	c := &relay{p: p, user: info.caller.UserID, sandbox: info.target.SandboxID, role: role, gen: gen, client: client, upstream: up}
	if p.beforeRegister != nil {
		p.beforeRegister()
	}
	if !p.reg.register(c) {
		// The owner changed between Route and here; the sweep missed this one.
		c.shut(reasonOwnerChanged)
		return
	}
	p.m.websockets.WithLabelValues(role).Inc()
	defer p.m.websockets.WithLabelValues(role).Dec()
	defer p.reg.unregister(c)
	c.run()
}

// admitWebSocket checks a handshake before anything reaches the sandbox: the origin,
// the handshake's shape, and the user's reconnect rate.
func (p *Proxy) admitWebSocket(w http.ResponseWriter, r *http.Request, c Caller) error {
	if err := p.checkOrigin(r); err != nil {
		return err
	}
	if r.Method != http.MethodGet || r.Header.Get("Sec-WebSocket-Key") == "" || r.Header.Get("Sec-WebSocket-Version") != "13" {
		return fmt.Errorf("not a WebSocket handshake: want GET with Sec-WebSocket-Key and Sec-WebSocket-Version 13: %w", errdefs.ErrInvalidArgument)
	}
	ok, retry, report := p.allowReconnect(r.Context(), c.UserID)
	if ok {
		return nil
	}
	if report {
		p.reportStorm(r.Context(), c)
	}
	secs := int(math.Ceil(retry.Seconds()))
	w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
	return fmt.Errorf("too many WebSocket connections: more than %d in %s; retry in %d s: %w",
		p.opts.ReconnectLimit, p.opts.ReconnectWindow, max(secs, 1), errdefs.ErrLimitExceeded)
}

// allowReconnect counts a WebSocket attempt by userID: in the shared store when there is
// one, else (or when it fails) in memory.
func (p *Proxy) allowReconnect(ctx context.Context, userID string) (ok bool, retry time.Duration, report bool) {
	if p.opts.Reconnects != nil {
		ok, retry, report, err := p.opts.Reconnects(ctx, userID, time.Now(), p.opts.ReconnectWindow, p.opts.ReconnectLimit)
		if err == nil {
			return ok, retry, report
		}
		p.log.WarnContext(ctx, "proxy: reconnect attempts not shared: counted here alone", "user", userID, "err", err)
	}
	return p.storms.allow(userID)
}

func (p *Proxy) reportStorm(ctx context.Context, c Caller) {
	p.m.storms.Inc()
	p.log.WarnContext(ctx, "proxy: reconnect storm", "user", c.UserID, "role", c.Role,
		"limit", p.opts.ReconnectLimit, "window", p.opts.ReconnectWindow)
	if p.opts.Event != nil {
		p.opts.Event(ctx, c.UserID, "proxy.reconnect_storm", map[string]any{
			"role":  c.Role,
			"limit": p.opts.ReconnectLimit, "window_seconds": p.opts.ReconnectWindow.Seconds(),
		})
	}
}

// wsHandshakeHeaders are set by the WebSocket library on each side; the client's must
// not reach the app.
var wsHandshakeHeaders = []string{
	"Upgrade", "Connection", "Host", "Sec-Websocket-Key", "Sec-Websocket-Version",
	"Sec-Websocket-Extensions", "Sec-Websocket-Protocol", "Sec-Websocket-Accept",
	"Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Content-Length",
}

// dialUpstream opens the app's end with the client's scrubbed headers and subprotocols.
func (p *Proxy) dialUpstream(r *http.Request, info *reqInfo) (*websocket.Conn, error) {
	h := r.Header.Clone()
	for _, k := range headerTokens(h, "Connection") {
		h.Del(k)
	}
	for _, k := range wsHandshakeHeaders {
		h.Del(k)
	}
	scrubRequest(h, p.isReserved)
	setXForwarded(h, r)
	stampRequest(h, info)
	u := url.URL{Scheme: "ws", Host: info.target.SandboxID, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	// The handshake is bounded, but not by the request: the connection outlives it.
	ctx, cancel := context.WithTimeout(p.ctx, dialTimeout)
	defer cancel()
	c, res, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{
		HTTPClient:      &http.Client{Transport: p.tr, CheckRedirect: noRedirects},
		HTTPHeader:      h,
		Host:            r.Host,
		Subprotocols:    headerTokens(r.Header, "Sec-WebSocket-Protocol"),
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		if res != nil && res.StatusCode != http.StatusSwitchingProtocols {
			return nil, fmt.Errorf("sandbox %s: %w", info.target.SandboxID, refusal(fmt.Sprintf("it answered the WebSocket handshake with %d", res.StatusCode)))
		}
		return nil, err
	}
	c.SetReadLimit(p.opts.MaxMessageBytes)
	return c, nil
}

func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// setXForwarded does for the WebSocket handshake what ProxyRequest.SetXForwarded does
// for HTTP; the client's own X-Forwarded-* are gone by now.
func setXForwarded(h http.Header, r *http.Request) {
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		h.Set("X-Forwarded-For", ip)
	}
	h.Set("X-Forwarded-Host", r.Host)
	proto := "http"
	if r.TLS != nil {
		proto = "https"
	}
	h.Set("X-Forwarded-Proto", proto)
}

// accept completes the client's handshake with the subprotocol the app chose. The
// origin was checked already; compression stays off, so messages pass as they are.
func (p *Proxy) accept(w http.ResponseWriter, r *http.Request, info *reqInfo, up *websocket.Conn) (*websocket.Conn, error) {
	stampResponse(w.Header(), info)
	opts := &websocket.AcceptOptions{InsecureSkipVerify: true, CompressionMode: websocket.CompressionDisabled}
	if sp := up.Subprotocol(); sp != "" {
		opts.Subprotocols = []string{sp}
	}
	c, err := websocket.Accept(w, r, opts)
	if err != nil {
		return nil, fmt.Errorf("WebSocket handshake: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	c.SetReadLimit(p.opts.MaxMessageBytes)
	return c, nil
}

// relay is one WebSocket held open through the proxy, with the generation it routed under.
type relay struct {
	p                *Proxy
	user, sandbox    string
	role             string
	gen              int64
	client, upstream *websocket.Conn
	mu               sync.Mutex
	closing          bool // claimed: the first reason to close wins
}

// outcome is how one direction of a relay ended.
type outcome struct {
	fromClient bool  // the direction read from the client
	write      bool  // err came from writing to the other end
	err        error // never nil
}

// run relays messages both ways until either end closes, then closes the other with
// the same code and reason.
func (c *relay) run() {
	ctx, cancel := context.WithCancel(c.p.ctx)
	defer cancel()
	done := make(chan outcome, 2)
	go func() { done <- pump(ctx, c.client, c.upstream, true) }()
	go func() { done <- pump(ctx, c.upstream, c.client, false) }()
	first := <-done
	if first.write {
		// A write fails when the other end closed; its reader has the close code.
		select {
		case second := <-done:
			c.end(second)
			c.end(first)
			return
		case <-time.After(time.Second):
		}
	}
	c.end(first)
	<-done
}

// pump copies messages from src to dst, type preserved, streaming each one.
func pump(ctx context.Context, src, dst *websocket.Conn, fromClient bool) outcome {
	for {
		typ, rd, err := src.Reader(ctx)
		if err != nil {
			return outcome{fromClient: fromClient, err: err}
		}
		wr, err := dst.Writer(ctx, typ)
		if err != nil {
			return outcome{fromClient: fromClient, write: true, err: err}
		}
		er := &errReader{r: rd}
		if _, err := io.Copy(wr, er); err != nil {
			return outcome{fromClient: fromClient, write: er.err == nil, err: err}
		}
		if err := wr.Close(); err != nil {
			return outcome{fromClient: fromClient, write: true, err: err}
		}
	}
}

type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(b []byte) (int, error) {
	n, err := e.r.Read(b)
	if err != nil && err != io.EOF {
		e.err = err
	}
	return n, err
}

// end closes the relay the way o ended it: a close frame passes on with its code and
// reason; a broken end closes the other with 1001 (client gone) or 1014 (bad gateway).
func (c *relay) end(o outcome) {
	var ce websocket.CloseError
	closed := errors.As(o.err, &ce)
	clientSide := o.fromClient != o.write // the end o.err came from
	switch {
	case closed && clientSide:
		c.close(reasonClient, ce.Code, ce.Reason, ce.Code, ce.Reason)
	case closed:
		c.close(reasonUpstream, ce.Code, ce.Reason, ce.Code, ce.Reason)
	case clientSide:
		c.close(reasonClientError, websocket.StatusGoingAway, "", websocket.StatusGoingAway, "the client went away")
	default:
		c.close(reasonUpstreamError, websocket.StatusBadGateway, "the sandbox app's connection failed", websocket.StatusGoingAway, "")
	}
}

// shut closes the relay on the proxy's own account.
func (c *relay) shut(reason string) {
	if f := c.claim(shutCodes(reason)); f != nil {
		f()
	}
}

// shutSoon decides now that the relay closes for reason, so that nothing that breaks
// meanwhile (its sandbox's connections, say) changes the code the client gets, and
// leaves the close handshakes to a goroutine.
func (c *relay) shutSoon(reason string) {
	if f := c.claim(shutCodes(reason)); f != nil {
		go f()
	}
}

func shutCodes(reason string) (string, websocket.StatusCode, string, websocket.StatusCode, string) {
	switch reason {
	case reasonOwnerChanged:
		return reason, api.CloseOwnerChanged, "owner changed: reconnect", websocket.StatusGoingAway, "role owner changed"
	case reasonOwnerGone:
		return reason, api.CloseOwnerGone, "sandbox gone: reconnect", websocket.StatusGoingAway, "sandbox stopping"
	}
	return reason, websocket.StatusGoingAway, "paddock is shutting down", websocket.StatusGoingAway, "paddock is shutting down"
}

// close closes both ends, unless the relay is closing already.
func (c *relay) close(reason string, clientCode websocket.StatusCode, clientReason string, upCode websocket.StatusCode, upReason string) {
	if f := c.claim(reason, clientCode, clientReason, upCode, upReason); f != nil {
		f()
	}
}

// claim makes the first caller's close the relay's: it returns the work that closes
// both ends concurrently (each Close waits for its peer's reply), or nil for later callers.
func (c *relay) claim(reason string, clientCode websocket.StatusCode, clientReason string, upCode websocket.StatusCode, upReason string) func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return nil
	}
	c.closing = true
	c.p.m.wsCloses.WithLabelValues(reason).Inc()
	return func() {
		var wg sync.WaitGroup
		wg.Go(func() { closeConn(c.client, clientCode, clientReason) })
		wg.Go(func() { closeConn(c.upstream, upCode, upReason) })
		wg.Wait()
	}
}

// closeConn sends code, or closes at once when code cannot be sent on the wire.
func closeConn(c *websocket.Conn, code websocket.StatusCode, reason string) {
	if code == websocket.StatusAbnormalClosure || code == websocket.StatusTLSHandshake || code < 1000 {
		_ = c.CloseNow()
		return
	}
	if err := c.Close(code, reason); err != nil {
		_ = c.CloseNow()
	}
}
