package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store"
)

// Handing a client's connection on: a replica that finds an apps or desktop host's sandbox
// running on another replica gives that replica the client's whole connection, instead of
// forwarding each request over an HTTP hop (docs/postgres.md#replicas).
//
//  1. The front dials the owner's advertised address and sends GET handOnPath with
//     "Upgrade: paddock-hand-on/1", signed with HopHeader as a forwarded request is.
//  2. The owner answers 101 with a fresh nonce (handOnNonceHeader).
//  3. The front sends the preamble (readPreamble): the client's address and whether its
//     connection was TLS, under an HMAC of the nonce with the cluster key. Then the
//     client's first request as the front parsed it, then the client's bytes as they come;
//     the owner's bytes go back to the client unchanged.
//
// The owner serves the connection as one of its own clients' (handedListener): every
// request on it is authenticated and checked there as any other. The preamble is read only
// after a signed upgrade, so a client can never send one; its nonce is the owner's and
// used once, so a recorded hand-on cannot be replayed with another preamble.
const (
	handOnPath        = "/.paddock/hand-on"
	handOnProto       = "paddock-hand-on/1"
	handOnNonceHeader = "Paddock-Hand-On-Nonce"
	// handOnWait bounds each step of setting up a hand-on, on either side.
	handOnWait = 10 * time.Second
	// handOnLinger is how long the front waits for the client to close once the owner
	// closed its side (the client may still be sending; closing at once could reset
	// what the owner's last response left in flight).
	handOnLinger = 5 * time.Second
)

// The preamble, on the wire: "PDKH", version 1, flags (bit 0: the client's connection was
// TLS), the length of the client's address (0 to maxPreambleAddr), the address as
// host:port, and an HMAC-SHA256 under the cluster key of the nonce, the flags and the
// address.
const (
	preambleMagic   = "PDKH"
	preambleVersion = 1
	preambleSecure  = 1 << 0
	maxPreambleAddr = 64
)

// preamble is what the front knows of a client that the owner does not.
type preamble struct {
	secure bool
	client string // host:port, or "" when unknown
	mac    [sha256.Size]byte
}

func preambleMAC(key, nonce []byte, secure bool, client string) [sha256.Size]byte {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "paddock hand-on v1\n%x\n%t\n%s", nonce, secure, client)
	var sum [sha256.Size]byte
	copy(sum[:], m.Sum(nil))
	return sum
}

// signedPreamble is the preamble for a client, under key, for the owner's nonce.
func signedPreamble(key, nonce []byte, secure bool, client string) preamble {
	if _, err := netip.ParseAddrPort(client); err != nil || len(client) > maxPreambleAddr {
		client = ""
	}
	return preamble{secure: secure, client: client, mac: preambleMAC(key, nonce, secure, client)}
}

func (p preamble) append(b []byte) []byte {
	var flags byte
	if p.secure {
		flags |= preambleSecure
	}
	b = append(b, preambleMagic...)
	b = append(b, preambleVersion, flags, byte(len(p.client)))
	b = append(b, p.client...)
	return append(b, p.mac[:]...)
}

// readPreamble reads one preamble from r; it checks the form, not the MAC (verify).
func readPreamble(r io.Reader) (preamble, error) {
	var head [len(preambleMagic) + 3]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return preamble{}, fmt.Errorf("preamble: %w", err)
	}
	if string(head[:4]) != preambleMagic {
		return preamble{}, errors.New("preamble: not PDKH")
	}
	if head[4] != preambleVersion {
		return preamble{}, fmt.Errorf("preamble: version %d, want %d", head[4], preambleVersion)
	}
	flags, n := head[5], int(head[6])
	if flags&^preambleSecure != 0 {
		return preamble{}, fmt.Errorf("preamble: unknown flags %#x", flags)
	}
	if n > maxPreambleAddr {
		return preamble{}, fmt.Errorf("preamble: address of %d bytes, at most %d", n, maxPreambleAddr)
	}
	rest := make([]byte, n+sha256.Size)
	if _, err := io.ReadFull(r, rest); err != nil {
		return preamble{}, fmt.Errorf("preamble: %w", err)
	}
	p := preamble{secure: flags&preambleSecure != 0, client: string(rest[:n])}
	copy(p.mac[:], rest[n:])
	if p.client != "" {
		if _, err := netip.ParseAddrPort(p.client); err != nil {
			return preamble{}, fmt.Errorf("preamble: client address: %w", err)
		}
	}
	return p, nil
}

// verify checks p's MAC for nonce under key.
func (p preamble) verify(key, nonce []byte) error {
	want := preambleMAC(key, nonce, p.secure, p.client)
	if !hmac.Equal(p.mac[:], want[:]) {
		return errors.New("preamble: its MAC is wrong (another cluster key, or another connection's)")
	}
	return nil
}

// handed is what the owner knows of a connection handed on to it.
type handed struct {
	from   string // the front replica
	secure bool   // the client's own connection was TLS
}

type handedKey struct{}

// handedOf is what a request's connection was handed on with, or nil.
func handedOf(r *http.Request) *handed {
	h, _ := r.Context().Value(handedKey{}).(*handed)
	return h
}

// handedConn is a client's connection as the owner serves it: bytes the upgrade's reader
// buffered come first, and its remote address is the client's.
type handedConn struct {
	net.Conn
	br     *bufio.Reader
	remote net.Addr
	info   *handed
}

func (c *handedConn) Read(p []byte) (int, error) {
	if c.br != nil && c.br.Buffered() > 0 {
		return c.br.Read(p)
	}
	return c.Conn.Read(p)
}

// ReadFrom keeps a response body's copy to the connection a splice, as on a plain one.
func (c *handedConn) ReadFrom(r io.Reader) (int64, error) { return io.Copy(c.Conn, r) }

func (c *handedConn) RemoteAddr() net.Addr { return c.remote }

// handedListener is what the owner's server for handed-on connections accepts from.
type handedListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
	addr   net.Addr
}

func newHandedListener() *handedListener {
	return &handedListener{conns: make(chan net.Conn), closed: make(chan struct{}),
		addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}
}

func (l *handedListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *handedListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *handedListener) Addr() net.Addr { return l.addr }

// push gives c to the server; it is closed when the listener is.
func (l *handedListener) push(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.closed:
		c.Close()
	}
}

// handOns serves the connections handed on to this replica and holds those it handed on.
type handOns struct {
	l   *handedListener
	srv *http.Server
	mu  sync.Mutex
	out map[net.Conn]net.Conn // client → owner, while spliced
}

// startHandOns starts the server of handed-on connections, on the same handler.
func (s *Server) startHandOns() {
	h := &handOns{l: newHandedListener(), out: map[net.Conn]net.Conn{}}
	h.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if hd := handedOf(r); hd != nil && hd.secure && r.TLS == nil {
				// The client's connection to the front was TLS: answer as over TLS (cookie
				// names, Secure, X-Forwarded-Proto).
				r.TLS = &tls.ConnectionState{HandshakeComplete: true}
			}
			s.handler.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if hc, ok := c.(*handedConn); ok {
				return context.WithValue(ctx, handedKey{}, hc.info)
			}
			return ctx
		},
	}
	s.handOns = h
	go func() { _ = h.srv.Serve(h.l) }()
}

// shutdown stops taking handed-on connections and lets their requests finish (until ctx
// ends), then closes what this replica handed on.
func (h *handOns) shutdown(ctx context.Context) error {
	err := h.srv.Shutdown(ctx)
	h.closeOut()
	return err
}

// close closes every connection, handed on to this replica or by it.
func (h *handOns) close() {
	_ = h.srv.Close()
	h.closeOut()
}

func (h *handOns) closeOut() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c, o := range h.out {
		c.Close()
		o.Close()
	}
}

// isHandOn reports a request to hand a connection on.
func isHandOn(r *http.Request) bool {
	return r.URL.Path == handOnPath && strings.EqualFold(r.Header.Get("Upgrade"), handOnProto)
}

// acceptHandOn takes the connection of a signed hand-on request, checks its preamble and
// serves it as a client's. Anything unsigned is refused before a byte of preamble is read.
func (s *Server) acceptHandOn(w http.ResponseWriter, r *http.Request) {
	hp := hopOf(r)
	if hp == nil || s.handOns == nil || handedOf(r) != nil {
		s.log.Warn("a hand-on request that no replica signed: refused", "from", r.RemoteAddr)
		w.Header().Set("Connection", "close")
		api.WriteError(w, s.log, fmt.Errorf("%s: handing a connection on is for this cluster's replicas, signed with its key: %w", handOnPath, errdefs.ErrPermissionDenied))
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		api.WriteError(w, s.log, fmt.Errorf("%s: this connection cannot be handed on (%v): %w", handOnPath, err, errdefs.ErrInvalidArgument))
		return
	}
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	_ = conn.SetDeadline(time.Now().Add(handOnWait))
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: %s\r\nConnection: Upgrade\r\n%s: %s\r\n\r\n",
		handOnProto, handOnNonceHeader, base64.RawURLEncoding.EncodeToString(nonce))
	p, err := s.readHandOn(brw, nonce)
	if err != nil {
		s.log.Warn("a connection handed on: refused", "replica", hp.from, "err", err)
		conn.Close()
		return
	}
	_ = conn.SetDeadline(time.Time{})
	remote := conn.RemoteAddr()
	if p.client != "" {
		remote = net.TCPAddrFromAddrPort(netip.MustParseAddrPort(p.client))
	}
	s.m.handedIn.WithLabelValues(hp.from).Inc()
	s.handOns.l.push(&handedConn{Conn: conn, br: brw.Reader, remote: remote, info: &handed{from: hp.from, secure: p.secure}})
}

func (s *Server) readHandOn(brw *bufio.ReadWriter, nonce []byte) (preamble, error) {
	if err := brw.Flush(); err != nil {
		return preamble{}, err
	}
	p, err := readPreamble(brw.Reader)
	if err != nil {
		return p, err
	}
	return p, p.verify(s.cluster.key, nonce)
}

// dialHandOn opens a connection to rep that it takes as a handed-on client's: the
// upgrade is answered with the owner's nonce, for the preamble.
func (c *cluster) dialHandOn(ctx context.Context, rep store.Replica) (net.Conn, []byte, error) {
	conn, err := (&net.Dialer{Timeout: handOnWait}).DialContext(ctx, "tcp", rep.Advertise)
	if err != nil {
		return nil, nil, err
	}
	nonce, err := c.upgrade(conn, rep)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, nonce, nil
}

func (c *cluster) upgrade(conn net.Conn, rep store.Replica) ([]byte, error) {
	_ = conn.SetDeadline(time.Now().Add(handOnWait))
	req, err := http.NewRequest(http.MethodGet, "http://"+rep.Advertise+handOnPath, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Upgrade", handOnProto)
	req.Header.Set("Connection", "Upgrade")
	c.sign(req, "")
	if err := req.Write(conn); err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(conn, 512)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return nil, fmt.Errorf("hand-on answered %s", resp.Status)
	}
	nonce, err := base64.RawURLEncoding.DecodeString(resp.Header.Get(handOnNonceHeader))
	if err != nil || len(nonce) != 16 {
		return nil, errors.New("hand-on answered without a nonce")
	}
	if br.Buffered() > 0 {
		return nil, errors.New("hand-on answered more than its upgrade")
	}
	_ = conn.SetDeadline(time.Time{})
	return nonce, nil
}

// handOn hands the connection r came on to rep, which runs its sandbox: r and every
// request after it on that connection are rep's to serve. It reports false, having
// written nothing, when it cannot: not HTTP/1, a connection handed on already, rep not
// reached.
func (s *Server) handOn(w http.ResponseWriter, r *http.Request, rep store.Replica) bool {
	if r.ProtoMajor != 1 || handedOf(r) != nil || s.handOns == nil {
		return false
	}
	owner, nonce, err := s.cluster.dialHandOn(r.Context(), rep)
	if err != nil {
		s.log.Debug("hand-on: falling back to forwarding", "replica", rep.ID, "err", err)
		return false
	}
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		owner.Close()
		return false
	}
	_ = client.SetDeadline(time.Time{})
	secure := r.TLS != nil
	var b bytes.Buffer
	b.Write(signedPreamble(s.cluster.key, nonce, secure, r.RemoteAddr).append(nil))
	writeRequestHead(&b, r)
	if n := brw.Reader.Buffered(); n > 0 {
		rest, _ := brw.Reader.Peek(n)
		b.Write(rest)
	}
	if _, err := owner.Write(b.Bytes()); err != nil {
		s.log.Warn("hand-on: the owner went away", "replica", rep.ID, "err", err)
		client.Close()
		owner.Close()
		return true
	}
	s.m.handedOut.WithLabelValues(rep.ID).Inc()
	s.handOns.splice(client, owner)
	return true
}

// writeRequestHead writes r's request line and header as the server parsed them; the body,
// unread, follows on the connection as the client sent it.
func writeRequestHead(b *bytes.Buffer, r *http.Request) {
	fmt.Fprintf(b, "%s %s %s\r\n", r.Method, r.RequestURI, r.Proto)
	if r.Host != "" {
		fmt.Fprintf(b, "Host: %s\r\n", r.Host)
	}
	_ = r.Header.Write(b)
	if len(r.TransferEncoding) > 0 {
		fmt.Fprintf(b, "Transfer-Encoding: %s\r\n", strings.Join(r.TransferEncoding, ", "))
	}
	if len(r.Trailer) > 0 {
		keys := make([]string, 0, len(r.Trailer))
		for k := range r.Trailer {
			keys = append(keys, k)
		}
		fmt.Fprintf(b, "Trailer: %s\r\n", strings.Join(keys, ", "))
	}
	b.WriteString("\r\n")
}

// splice copies bytes both ways between client and owner until both ends are done.
func (h *handOns) splice(client, owner net.Conn) {
	h.mu.Lock()
	h.out[client] = owner
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.out, client)
		h.mu.Unlock()
		client.Close()
		owner.Close()
	}()
	up := make(chan struct{})
	go func() {
		defer close(up)
		if err := relay(owner, client); err != nil || closeWrite(owner) != nil {
			owner.Close()
		}
	}()
	if err := relay(client, owner); err != nil || closeWrite(client) != nil {
		client.Close()
	} else {
		_ = client.SetReadDeadline(time.Now().Add(handOnLinger))
	}
	<-up
}

// relayBuffer is what relay reads at a time before it turns to splice(2).
const relayBuffer = 8 << 10

// relay copies src to dst until src ends. Requests and responses that fit the buffer are
// read and written, which costs less than a splice through a pipe; once a read fills the
// buffer (a body in bulk), the rest goes by splice(2), the kernel's copy between the two
// TCP connections.
func relay(dst, src net.Conn) error {
	buf := make([]byte, relayBuffer)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if n == len(buf) {
			_, err := io.Copy(dst, src)
			return err
		}
	}
}

func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}
