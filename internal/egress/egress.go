package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/policy"
)

// Decider decides whether a host may be reached; *policy.Policy is one. It is given the
// host lower-cased, or an IP literal's address as text, never with a port.
type Decider interface {
	Host(host string) policy.Decision
}

// Resolver looks up a name's addresses; *net.Resolver is one. The proxy asks it only
// about names the Decider allowed.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer connects to an address; *net.Dialer is one. The proxy gives it an ip:port it has
// checked, never a name, and it must connect to exactly that.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Sandbox is whom a listener serves: every connection accepted from it is this sandbox's,
// whatever its requests say.
type Sandbox struct {
	// ID names the sandbox in every log line and [Event].
	ID string
	// Decider is the sandbox's policy; nil uses [Options.Decider].
	Decider Decider
}

// Defaults for the zero values of [Options].
const (
	DefaultHeaderTimeout  = 10 * time.Second
	DefaultDialTimeout    = 10 * time.Second
	DefaultIdleTimeout    = 5 * time.Minute
	DefaultMaxHeaderBytes = 64 << 10
	DefaultMaxConns       = 256
	// maxResponseHeaderBytes bounds an upstream's response headers.
	maxResponseHeaderBytes = 1 << 20
	// lingerTimeout is how long a refused client's unread bytes are drained before its
	// connection is closed, so that closing does not reset the connection before the
	// client has read why.
	lingerTimeout = 500 * time.Millisecond
)

// Options configure a [Proxy]. The zero value is a proxy that refuses everything (no
// Decider) and otherwise uses the defaults.
type Options struct {
	// Decider decides hosts for listeners whose [Sandbox] has none. With neither, every
	// request is refused.
	Decider Decider
	// Resolver resolves allowed names; nil is net.DefaultResolver (the host's DNS).
	Resolver Resolver
	// Dialer connects to checked addresses; nil is a net.Dialer with DialTimeout that
	// checks the address again just before connect(2).
	Dialer Dialer
	// Log is where decisions are logged; nil is slog.Default().
	Log *slog.Logger
	// Registerer receives the proxy's metrics; nil registers none. Proxies sharing a
	// registry share the collectors.
	Registerer prometheus.Registerer
	// Audit, when set, is called with every [Event], on the connection's goroutine: it
	// should enqueue, not write through. Its context is never canceled.
	Audit func(ctx context.Context, e Event)
	// Capabilities verifies the capability tokens requests carry (see checkCapability);
	// nil refuses every request that carries one.
	Capabilities CapabilityVerifier
	// ConnectPorts are the ports CONNECT may reach; nil is 443 only.
	ConnectPorts []uint16
	// HTTPPorts are the ports plain HTTP requests may reach; nil is 80 only.
	HTTPPorts []uint16
	// HeaderTimeout bounds reading a request's headers, and a tunnel's TLS ClientHello
	// (with AllowOpaqueTunnels, the first bytes of a tunnel wait as long as IdleTimeout).
	HeaderTimeout time.Duration
	// DialTimeout bounds resolving a name, and connecting to its addresses.
	DialTimeout time.Duration
	// IdleTimeout closes an exchange or tunnel that moves no byte either way for this
	// long, and a client connection that sends no next request.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's line and headers.
	MaxHeaderBytes int
	// MaxConns bounds the connections one listener (one sandbox) has open; over it, a new
	// connection is answered 503 and closed.
	MaxConns int
	// AllowOpaqueTunnels lets a CONNECT tunnel carry a protocol other than TLS (its content
	// is then not checked at all). When false, a tunnel must start with a TLS ClientHello.
	AllowOpaqueTunnels bool
	// UnsafeAllowAddrs exempts addresses from the address checks (loopback, private,
	// metadata…). It exists for tests, which reach upstream servers on loopback; a
	// production configuration never sets it.
	UnsafeAllowAddrs []netip.Prefix
	// UpstreamProxy, when set, is a forward proxy the proxy connects through instead of
	// to hosts directly (see upstream.go): http://[user:password@]host:port. Every
	// request is still decided here first.
	UpstreamProxy *url.URL
}

// ErrClosed is returned by Serve and ServeSandbox once the proxy is closed.
var ErrClosed = fmt.Errorf("egress proxy closed: %w", errdefs.ErrUnavailable)

// Proxy is the egress proxy. Its methods are safe for concurrent use.
type Proxy struct {
	decider  Decider
	resolver Resolver
	dialer   Dialer
	log      *slog.Logger
	m        *metrics
	audit    func(context.Context, Event)
	caps     CapabilityVerifier
	addrs    *addrPolicy

	connectPorts, httpPorts    []uint16
	headerTimeout, dialTimeout time.Duration
	idleTimeout                time.Duration
	maxHeader                  int64
	maxConns                   int
	opaque                     bool
	upstream                   *url.URL

	ids    atomic.Uint64
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	serving   sync.WaitGroup
}

// New returns a proxy configured by o. It serves nothing until Serve or ServeSandbox.
func New(o Options) *Proxy {
	p := &Proxy{
		decider: o.Decider, resolver: o.Resolver, dialer: o.Dialer, log: o.Log, audit: o.Audit, caps: o.Capabilities,
		addrs:        &addrPolicy{allow: o.UnsafeAllowAddrs},
		connectPorts: o.ConnectPorts, httpPorts: o.HTTPPorts,
		headerTimeout: o.HeaderTimeout, dialTimeout: o.DialTimeout, idleTimeout: o.IdleTimeout,
		maxHeader: int64(o.MaxHeaderBytes), maxConns: o.MaxConns, opaque: o.AllowOpaqueTunnels, upstream: o.UpstreamProxy,
		listeners: map[net.Listener]struct{}{},
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	if p.log == nil {
		p.log = slog.Default()
	}
	if p.decider == nil {
		p.decider = noPolicy{}
	}
	if p.resolver == nil {
		p.resolver = net.DefaultResolver
	}
	if p.connectPorts == nil {
		p.connectPorts = []uint16{443}
	}
	if p.httpPorts == nil {
		p.httpPorts = []uint16{80}
	}
	setDefault(&p.headerTimeout, DefaultHeaderTimeout)
	setDefault(&p.dialTimeout, DefaultDialTimeout)
	setDefault(&p.idleTimeout, DefaultIdleTimeout)
	setDefault(&p.maxHeader, DefaultMaxHeaderBytes)
	setDefault(&p.maxConns, DefaultMaxConns)
	if p.dialer == nil {
		p.dialer = &net.Dialer{Timeout: p.dialTimeout, KeepAlive: 30 * time.Second, ControlContext: p.controlDial}
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		p.log.Error("egress: registering metrics; they will not be exported", "err", err)
	}
	p.m = m
	if len(o.UnsafeAllowAddrs) > 0 {
		p.log.Warn("egress: UnsafeAllowAddrs is set: the proxy connects to these addresses whatever they are (loopback, private, metadata); this is for tests only",
			"prefixes", fmt.Sprint(o.UnsafeAllowAddrs))
	}
	return p
}

func setDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// controlDial checks the socket address once more just before connect(2): the address
// dialed is the address checked, whatever happened in between.
func (p *Proxy) controlDial(ctx context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("egress: dialing %q, not an ip:port: %w", address, errdefs.ErrPermissionDenied)
	}
	private, _ := ctx.Value(privateKey{}).([]netip.Prefix)
	if why := p.addrs.check(ap.Addr(), private); why != "" {
		return fmt.Errorf("egress: refusing to connect to %s, %s: %w", ap, why, errdefs.ErrPermissionDenied)
	}
	return nil
}

// privateKey carries a dial's network.private ranges to controlDial.
type privateKey struct{}

// noPolicy is the Decider of a proxy given none: it fails closed.
type noPolicy struct{}

func (noPolicy) Host(string) policy.Decision {
	return policy.Decision{Rule: "egress.policy", Reason: "no network policy is attached to this sandbox's egress proxy"}
}

// Serve serves l with no sandbox identity and Options.Decider; see ServeSandbox.
func (p *Proxy) Serve(l net.Listener) error { return p.ServeSandbox(l, Sandbox{}) }

// ServeSandbox serves the connections accepted from l as sandbox sb's (the runner gives
// each sandbox its own socket, and this is how the proxy knows who is asking). It returns
// when l fails or is closed, or the proxy is closed (ErrClosed), after closing the
// connections it accepted and waiting for them to finish.
func (p *Proxy) ServeSandbox(l net.Listener, sb Sandbox) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	p.listeners[l] = struct{}{}
	p.serving.Add(1)
	p.mu.Unlock()
	defer p.serving.Done()
	defer func() {
		p.mu.Lock()
		delete(p.listeners, l)
		p.mu.Unlock()
	}()
	if sb.Decider == nil {
		sb.Decider = p.decider
	}

	ctx, cancel := context.WithCancel(p.ctx)
	var conns sync.WaitGroup
	defer conns.Wait()
	defer cancel() // closes every connection this listener accepted
	var open atomic.Int64
	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if p.isClosed() {
				return ErrClosed
			}
			if retryable(err) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				p.log.Warn("egress: accept failed; retrying", "sandbox", sb.ID, "err", err, "in", backoff)
				select {
				case <-time.After(backoff):
					continue
				case <-ctx.Done():
					return ErrClosed
				}
			}
			return fmt.Errorf("egress: sandbox %q: accept: %w", sb.ID, err)
		}
		backoff = 0
		if open.Add(1) > int64(p.maxConns) {
			open.Add(-1)
			p.overLimit(ctx, c, sb)
			continue
		}
		conns.Add(1)
		go func() {
			defer conns.Done()
			defer open.Add(-1)
			p.serveConn(ctx, c, sb)
		}()
	}
}

// retryable reports whether an Accept error is worth waiting out: out of file
// descriptors, or a connection aborted before it was accepted.
func retryable(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ENOBUFS) || isTimeout(err)
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// Close stops every listener, closes every connection and waits for them to finish.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	for l := range p.listeners {
		_ = l.Close()
	}
	p.mu.Unlock()
	p.cancel()
	p.serving.Wait()
	return nil
}

// overLimit answers a connection over MaxConns with 503 and closes it. It runs on the
// accept loop, briefly: a sandbox that floods the proxy slows only its own accepts.
func (p *Proxy) overLimit(ctx context.Context, c net.Conn, sb Sandbox) {
	ev := Event{ID: p.ids.Add(1), Sandbox: sb.ID, Stage: StageDenied, Status: http.StatusServiceUnavailable,
		Decision: policy.Decision{Rule: "egress.limit", Reason: fmt.Sprintf("the sandbox has %d connections open, the most it may", p.maxConns)}}
	p.record(ctx, ev)
	_ = c.SetDeadline(time.Now().Add(lingerTimeout / 5))
	writeRefusal(c, &refusal{status: ev.Status, rule: ev.Decision.Rule, reason: ev.Decision.Reason, proxyStatus: "connection_limit_reached"})
	closeWrite(c)
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	_ = c.Close()
}

// exchange is one request and what became of it.
type exchange struct {
	decider Decider
	client  *conn
	br      *bufio.Reader
	req     *request
	ev      Event
	start   time.Time
	out, in atomic.Int64 // bytes sandbox→upstream, upstream→sandbox
	// viaUpstream: the connection is to the upstream proxy (Options.UpstreamProxy).
	viaUpstream bool
	// private are the address ranges the host may be reached at though private.
	private []netip.Prefix
}

// serveConn serves one client connection: requests one after another until one is a
// CONNECT (the connection becomes the tunnel), fails, or asks to close.
func (p *Proxy) serveConn(ctx context.Context, nc net.Conn, sb Sandbox) {
	stop := context.AfterFunc(ctx, func() { _ = nc.Close() })
	defer stop()
	defer nc.Close()
	c := newConn(nc)
	br := bufio.NewReaderSize(c, 4096)
	for first := true; ; first = false {
		req, ev, ok := p.nextRequest(ctx, c, br, sb, first)
		if !ok {
			return
		}
		x := &exchange{decider: sb.Decider, client: c, br: br, req: req, ev: ev, start: time.Now()}
		if req.method == http.MethodConnect {
			p.connect(ctx, x)
			return
		}
		if !p.forward(ctx, x) {
			return
		}
	}
}

// nextRequest reads the next request's line and headers, bounded in size and time. It
// answers a malformed one itself and returns ok false when the connection is done.
func (p *Proxy) nextRequest(ctx context.Context, c *conn, br *bufio.Reader, sb Sandbox, first bool) (*request, Event, bool) {
	if !first {
		c.setFixed(time.Now().Add(p.idleTimeout))
		if _, err := br.Peek(1); err != nil {
			return nil, Event{}, false
		}
	}
	c.setFixed(time.Now().Add(p.headerTimeout))
	c.limit = p.maxHeader
	req, err := readRequest(br)
	hit := c.hitLimit
	c.limit, c.hitLimit = -1, false
	c.setFixed(time.Time{})
	ev := Event{ID: p.ids.Add(1), Sandbox: sb.ID}
	if req != nil {
		ev.Method = req.method
	}
	switch {
	case err == nil:
		return req, ev, true
	case hit || errors.Is(err, errTooLarge):
		p.refuse(ctx, &exchange{client: c, ev: ev}, &refusal{status: http.StatusRequestHeaderFieldsTooLarge,
			rule: "egress.request", reason: fmt.Sprintf("the request's headers are over %d bytes", p.maxHeader),
			proxyStatus: "http_request_error"})
	case errors.Is(err, errdefs.ErrInvalidArgument):
		p.refuse(ctx, &exchange{client: c, ev: ev}, badRequest("egress.request", err))
	case isTimeout(err):
		p.log.Debug("egress: no request headers in time; closing", "sandbox", sb.ID, "timeout", p.headerTimeout)
	}
	// Otherwise the client went away.
	return nil, ev, false
}

// open decides t for the exchange and connects to it: port, policy, resolution, address
// checks, dial, in that order; what refuses first is the answer.
func (p *Proxy) open(ctx context.Context, x *exchange, t target, ports []uint16) (net.Conn, *refusal) {
	x.ev.Host, x.ev.Port = t.host, t.port
	if !containsPort(ports, t.port) {
		return nil, deny("egress.port", http.StatusForbidden, "http_request_denied",
			"port %d is not open to %s through this proxy (open: %s)", t.port, methodName(x.req.method), portList(ports))
	}
	d := x.decider.Host(t.host)
	x.ev.Decision = d
	if !d.Allow {
		return nil, &refusal{status: http.StatusForbidden, stage: StageDenied, rule: d.Rule,
			reason: d.Reason, proxyStatus: "http_request_denied"}
	}
	if r := p.checkCapability(ctx, x, t.host); r != nil {
		return nil, r
	}
	if p.upstream != nil {
		return p.dialUpstream(ctx, x, t, x.req.method == http.MethodConnect)
	}
	if d.Private != nil {
		x.private = d.Private.Prefixes
	}
	addrs, ref := p.resolve(ctx, t, d)
	if ref != nil {
		return nil, ref
	}
	var ok []netip.Addr
	var refused []string
	for _, a := range addrs {
		a = a.Unmap()
		if why := p.addrs.check(a, x.private); why != "" {
			refused = append(refused, a.String()+" is "+why)
			if !x.ev.Addr.IsValid() {
				x.ev.Addr = netip.AddrPortFrom(a, t.port)
			}
			continue
		}
		ok = append(ok, a)
	}
	if len(ok) == 0 {
		return nil, deny("egress.address", http.StatusForbidden, "destination_ip_prohibited",
			"%s: %s; the proxy never connects there, even for an allowed host (allowed by %s), unless network.private names the host or its range",
			t.host, joinReasons(refused), d.Rule)
	}
	if len(refused) > 0 {
		p.log.Warn("egress: some addresses of an allowed host are refused; using the others",
			"sandbox", x.ev.Sandbox, "host", t.host, "refused", joinReasons(refused))
	}
	return p.dial(ctx, x, t, ok)
}

// resolve returns t's addresses: its own for an IP literal, else the Resolver's answer.
func (p *Proxy) resolve(ctx context.Context, t target, d policy.Decision) ([]netip.Addr, *refusal) {
	if t.ip.IsValid() {
		return []netip.Addr{t.ip}, nil
	}
	rctx, cancel := context.WithTimeout(ctx, p.dialTimeout)
	defer cancel()
	addrs, err := p.resolver.LookupNetIP(rctx, "ip", t.host)
	var dnsErr *net.DNSError
	switch {
	case err == nil && len(addrs) > 0:
		return addrs, nil
	case err == nil, errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		return nil, fail("egress.resolve", http.StatusBadGateway, "dns_error", "%s: no such host", t.host)
	case isTimeout(err) || errors.Is(err, context.DeadlineExceeded):
		return nil, fail("egress.resolve", http.StatusGatewayTimeout, "dns_timeout", "%s: resolving timed out after %s", t.host, p.dialTimeout)
	}
	// The resolver's own error names the host's DNS servers: that stays in the log.
	p.log.Info("egress: resolving an allowed host failed", "host", t.host, "rule", d.Rule, "err", err)
	return nil, fail("egress.resolve", http.StatusBadGateway, "dns_error", "%s: resolving failed", t.host)
}

// dial connects to the first of addrs that answers (at most four are tried), within
// DialTimeout in all.
func (p *Proxy) dial(ctx context.Context, x *exchange, t target, addrs []netip.Addr) (net.Conn, *refusal) {
	dctx, cancel := context.WithTimeout(ctx, p.dialTimeout)
	defer cancel()
	var err error
	for _, a := range addrs[:min(len(addrs), 4)] {
		ap := netip.AddrPortFrom(a, t.port)
		x.ev.Addr = ap
		var c net.Conn
		if c, err = p.dialer.DialContext(context.WithValue(dctx, privateKey{}, x.private), "tcp", ap.String()); err == nil {
			return c, nil
		}
		if dctx.Err() != nil {
			break
		}
	}
	switch {
	case errors.Is(err, errdefs.ErrPermissionDenied):
		return nil, deny("egress.address", http.StatusForbidden, "destination_ip_prohibited", "%s: the address was refused when connecting", x.ev.Addr)
	case isTimeout(err) || errors.Is(err, context.DeadlineExceeded):
		return nil, fail("egress.dial", http.StatusGatewayTimeout, "connection_timeout", "connecting to %s (%s) timed out after %s", t.host, x.ev.Addr, p.dialTimeout)
	case errors.Is(err, syscall.ECONNREFUSED):
		return nil, fail("egress.dial", http.StatusBadGateway, "connection_refused", "%s (%s) refused the connection", t.host, x.ev.Addr)
	}
	return nil, fail("egress.dial", http.StatusBadGateway, "destination_unavailable", "connecting to %s (%s) failed: %s", t.host, x.ev.Addr, printable(rootCause(err), 120))
}

// rootCause is the innermost error's text: the system call's complaint without the
// addresses the outer layers add.
func rootCause(err error) string {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err.Error()
		}
		err = u
	}
}

func containsPort(ports []uint16, port uint16) bool {
	for _, p := range ports {
		if p == port {
			return true
		}
	}
	return false
}

func methodName(m string) string {
	if m == http.MethodConnect {
		return "CONNECT"
	}
	return "plain HTTP"
}
