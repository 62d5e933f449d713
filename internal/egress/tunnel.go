package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/paddockhq/paddock/internal/policy"
)

// connect serves a CONNECT: decide and dial the authority, answer 200, check the TLS
// ClientHello against the authority, then relay both ways until either side is done.
func (p *Proxy) connect(ctx context.Context, x *exchange) {
	t, err := parseAuthority(x.req.target, 0)
	if err != nil {
		p.refuse(ctx, x, badRequest("egress.host", err))
		return
	}
	x.ev.Host, x.ev.Port = t.host, t.port
	if ref := checkHostHeader(x.req, t); ref != nil {
		p.refuse(ctx, x, ref)
		return
	}
	if x.req.body != nil {
		p.refuse(ctx, x, deny("egress.request", http.StatusBadRequest, "http_request_error", "a CONNECT request has no body"))
		return
	}
	nup, ref := p.open(ctx, x, t, p.connectPorts)
	if ref != nil {
		p.refuse(ctx, x, ref)
		return
	}
	defer nup.Close()
	stop := context.AfterFunc(ctx, func() { _ = nup.Close() })
	defer stop()
	p.tunnel(ctx, x, t, newConn(nup))
}

// tunnel runs a CONNECT whose upstream is connected: 200, the check of the first bytes,
// then the relay. The upstream may answer from the start (a server that speaks first,
// with AllowOpaqueTunnels), but nothing of the sandbox's reaches it before the check.
func (p *Proxy) tunnel(ctx context.Context, x *exchange, t target, up *conn) {
	client := x.client
	_ = client.SetWriteDeadline(time.Now().Add(p.headerTimeout))
	if _, err := io.WriteString(client.Conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		p.tunnelFailed(ctx, x, "the client went away before the tunnel opened")
		return
	}
	act := &activity{}
	down := make(chan error, 1)
	startDown := func() {
		client.setIdle(p.idleTimeout, act)
		up.setIdle(p.idleTimeout, act)
		go func() { down <- p.relayDown(x, up) }()
	}
	if p.opaque {
		// The server may speak first (SSH banners, SMTP): let it, while the client's
		// first bytes are awaited with no deadline but the idle one.
		startDown()
	} else {
		client.setFixed(time.Now().Add(p.headerTimeout))
	}

	raw, ref := p.checkTunnel(x, t)
	if ref != nil {
		x.ev.Stage, x.ev.Status = ref.stage, http.StatusOK
		x.ev.Decision = policy.Decision{Rule: ref.rule, Reason: ref.reason}
		p.record(ctx, x.ev)
		if ref.stage == StageDenied && len(raw) > 0 && raw[0] == recordHandshake {
			// The client's TLS stack reports the alert ("access denied"): clearer than EOF.
			_ = client.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = client.Conn.Write(accessDenied)
		}
		_ = up.Conn.Close()
		lingerClose(client.Conn)
		if p.opaque {
			<-down //nolint:errcheck // the copy back ends with the closed connections
		}
		return
	}
	x.ev.Stage, x.ev.Status = StageOpened, http.StatusOK
	p.record(ctx, x.ev)
	p.m.open.Inc()
	defer p.m.open.Dec()
	if !p.opaque {
		startDown()
	}
	errUp := p.relayUp(x, up, raw)
	if errUp != nil {
		_ = client.Conn.Close() // the sandbox's side failed: end the tunnel now
		_ = up.Conn.Close()
	} else {
		closeWrite(up.Conn) // the sandbox is done sending; the answer may still come
	}
	errDown := <-down
	_ = client.Conn.Close()
	x.ev.Stage, x.ev.BytesOut, x.ev.BytesIn, x.ev.Duration = StageClosed, x.out.Load(), x.in.Load(), time.Since(x.start)
	if err := errors.Join(errUp, errDown); err != nil && !isClosedErr(err) {
		p.log.Debug("egress: tunnel ended with an error", "sandbox", x.ev.Sandbox, "id", x.ev.ID, "err", err)
	}
	p.record(ctx, x.ev)
}

// checkTunnel reads the tunnel's first bytes. For TLS it reads the ClientHello and checks
// its server name against the CONNECT authority; raw is what was read, to forward once
// the tunnel is accepted.
func (p *Proxy) checkTunnel(x *exchange, t target) ([]byte, *refusal) {
	first, err := x.br.Peek(1)
	if err != nil {
		if isTimeout(err) {
			return nil, fail("egress.tls", 0, "", "the client sent no TLS ClientHello within %s", p.headerTimeout)
		}
		return nil, fail("egress.tls", 0, "", "the client closed the tunnel before sending anything")
	}
	if first[0] != recordHandshake {
		if p.opaque {
			return nil, nil
		}
		return nil, deny("egress.tls", 0, "", "the tunnel did not start with a TLS ClientHello; only TLS is carried through CONNECT, so that the server name can be checked")
	}
	raw, hello, err := readClientHello(x.br)
	if err != nil {
		if isTimeout(err) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return raw, fail("egress.tls", 0, "", "the client did not finish its ClientHello (%v)", rootCause(err))
		}
		return raw, deny("egress.tls", 0, "", "the tunnel's ClientHello is refused: %v", err)
	}
	x.ev.ServerName = hello.serverName
	if why := sniMismatch(t, hello.serverName); why != "" {
		return raw, deny("egress.sni", 0, "", "%s", why)
	}
	return raw, nil
}

// sniMismatch says why a ClientHello's server name does not fit the CONNECT target t, or
// "" when it does. The names must be equal after lower-casing; a name is required when
// CONNECT named a host, and only an IP literal may go without one.
func sniMismatch(t target, serverName string) string {
	if serverName == "" {
		if t.ip.IsValid() {
			return ""
		}
		return fmt.Sprintf("the ClientHello names no server, but CONNECT was for %s: send the server name (SNI)", t.host)
	}
	host, _, err := parseHost(serverName)
	if err != nil {
		return "the ClientHello's server name is malformed: " + errText(err)
	}
	if host != t.host {
		return fmt.Sprintf("the ClientHello asks for %s, but CONNECT was for %s: a tunnel may only carry TLS for the host it was opened to", quote(serverName), t.host)
	}
	return ""
}

// relayUp forwards the sandbox's bytes: the checked ClientHello, what the reader had
// buffered after it, then the connection itself.
func (p *Proxy) relayUp(x *exchange, up *conn, raw []byte) error {
	count := func(n int) { p.m.out.Add(float64(n)) }
	if len(raw) > 0 {
		if _, err := up.Write(raw); err != nil {
			return err
		}
		x.out.Add(int64(len(raw)))
		count(len(raw))
	}
	return copyBody(up, x.client, x.br, -1, &x.out, count)
}

// relayDown forwards the upstream's bytes to the sandbox. When the upstream is done, the
// sandbox reads EOF; when it fails, the tunnel ends.
func (p *Proxy) relayDown(x *exchange, up *conn) error {
	err := stream(x.client, up, -1, &x.in, func(n int) { p.m.in.Add(float64(n)) })
	if err != nil {
		_ = x.client.Conn.Close()
		_ = up.Conn.Close()
		return err
	}
	closeWrite(x.client.Conn)
	return nil
}

// tunnelFailed records an allowed tunnel that could not be opened.
func (p *Proxy) tunnelFailed(ctx context.Context, x *exchange, reason string) {
	x.ev.Stage = StageFailed
	x.ev.Decision = policy.Decision{Rule: "egress.tunnel", Reason: reason}
	p.record(ctx, x.ev)
}

// checkHostHeader checks that a request's Host header, when it has one, names the
// request's target. For CONNECT a Host without a port means the target's port.
func checkHostHeader(req *request, t target) *refusal {
	hosts := req.header["Host"]
	if len(hosts) == 0 {
		return nil
	}
	if len(hosts) > 1 {
		return deny("egress.host", http.StatusBadRequest, "http_request_error", "the request has %d Host headers", len(hosts))
	}
	def := uint16(80)
	if req.method == http.MethodConnect {
		def = t.port
	}
	h, err := parseAuthority(hosts[0], def)
	if err != nil {
		return deny("egress.host", http.StatusBadRequest, "http_request_error", "the Host header: %s", errText(err))
	}
	if h.host != t.host || h.port != t.port {
		return deny("egress.host", http.StatusBadRequest, "http_request_error",
			"the Host header names %s, but the request is for %s: they must be the same host", h.authority(), t.authority())
	}
	return nil
}

func isClosedErr(err error) bool {
	return errors.Is(err, net.ErrClosed) || isTimeout(err)
}
