package egress

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Upstream proxy. With Options.UpstreamProxy set, the proxy still decides every request
// (policy, ports, capability) but connects through the operator's forward proxy instead of
// to the host: a CONNECT is relayed as a CONNECT to it, a plain request is sent to it in
// absolute form. The host's name goes to the upstream proxy unresolved: it resolves and
// connects, so the address checks are its business then. The upstream proxy's own address
// is the operator's configuration and is not checked.

// ParseUpstreamProxy checks an upstream proxy URL: http://[user:password@]host:port.
func ParseUpstreamProxy(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "http" || u.Host == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("upstream proxy %q: want http://host:port, with user:password@ if it asks for them: %w", redactURL(s), errdefs.ErrInvalidArgument)
	}
	return u, nil
}

// redactURL is s with any password replaced, for messages.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "(unparsable)"
}

// proxyAuthorization is the Proxy-Authorization header the upstream proxy gets, or "".
func (p *Proxy) proxyAuthorization() string {
	if p.upstream.User == nil {
		return ""
	}
	pw, _ := p.upstream.User.Password()
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(p.upstream.User.Username()+":"+pw))
}

// dialUpstream connects to the upstream proxy. For a tunnel it asks the proxy to CONNECT
// to t and waits for its 2xx; for plain HTTP the request goes to it as it is.
func (p *Proxy) dialUpstream(ctx context.Context, x *exchange, t target, tunnel bool) (net.Conn, *refusal) {
	x.viaUpstream = true
	dctx, cancel := context.WithTimeout(ctx, p.dialTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(dctx, "tcp", p.upstream.Host)
	if err != nil {
		return nil, fail("egress.upstream", http.StatusBadGateway, "proxy_internal_error", "the upstream proxy %s is unreachable: %s", p.upstream.Host, printable(rootCause(err), 120))
	}
	if !tunnel {
		return c, nil
	}
	_ = c.SetDeadline(time.Now().Add(p.dialTimeout))
	req := "CONNECT " + t.authority() + " HTTP/1.1\r\nHost: " + t.authority() + "\r\n"
	if a := p.proxyAuthorization(); a != "" {
		req += "Proxy-Authorization: " + a + "\r\n"
	}
	if _, err := c.Write([]byte(req + "\r\n")); err != nil {
		c.Close()
		return nil, fail("egress.upstream", http.StatusBadGateway, "proxy_internal_error", "the upstream proxy %s: %s", p.upstream.Host, printable(rootCause(err), 120))
	}
	// Read the answer byte by byte up to its blank line: what follows is the tunnel's.
	resp, err := http.ReadResponse(bufio.NewReaderSize(oneByte{c}, 1), &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, fail("egress.upstream", http.StatusBadGateway, "proxy_internal_error", "the upstream proxy %s sent no valid answer to CONNECT %s", p.upstream.Host, t.authority())
	}
	if resp.StatusCode/100 != 2 {
		c.Close()
		return nil, fail("egress.upstream", http.StatusBadGateway, "proxy_internal_error", "the upstream proxy %s refused CONNECT %s: %s", p.upstream.Host, t.authority(), printable(resp.Status, 80))
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// oneByte reads at most one byte at a time, so that a bufio.Reader on it never reads past
// the end of the upstream proxy's answer into the tunnel.
type oneByte struct{ c net.Conn }

func (o oneByte) Read(b []byte) (int, error) {
	if len(b) > 1 {
		b = b[:1]
	}
	return o.c.Read(b)
}

// absoluteTarget is the request target a plain request has on its way to the upstream
// proxy: the absolute URI of origin at t.
func absoluteTarget(t target, origin string) string {
	return "http://" + t.hostHeader(80) + strings.TrimPrefix(origin, "*")
}

// proxyAuthorizationFor is the Proxy-Authorization of x's request: the upstream proxy's
// when it goes there, else none.
func (p *Proxy) proxyAuthorizationFor(x *exchange) string {
	if !x.viaUpstream {
		return ""
	}
	return p.proxyAuthorization()
}
