package egress

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paddockhq/paddock/internal/policy"
)

// upstreamAddr is where the tests' upstream servers listen: a loopback address that
// UnsafeAllowAddrs exempts, unlike 127.0.0.1, which stays refused like all of loopback.
const upstreamAddr = "127.0.0.2"

// testPolicy allows the names the fake resolver knows, some of which resolve where the
// proxy must never connect.
const testPolicy = `
network:
  default: deny
  allow: ["allowed.test", "*.wild.test", "other.test", "rebind.test", "meta.test", "mapped.test",
          "nat64.test", "mixed.test", "gone.test", "127.0.0.1", "169.254.169.254", "127.0.0.2"]
  deny: ["evil.wild.test"]
`

// fakeResolver is the DNS the tests control: it answers from a table and writes down every
// name it is asked about, so a test can check that a denied name never reached DNS.
type fakeResolver struct {
	mu    sync.Mutex
	names map[string][]netip.Addr
	asked []string
}

func (r *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, host)
	if a, ok := r.names[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (r *fakeResolver) wasAsked(host string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.asked, host)
}

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

// seenRequest is a request as the plain upstream received it.
type seenRequest struct {
	Method, URI, Host string
	Header            http.Header
	Body              string
}

// harness is a proxy serving one sandbox on a Unix socket, as the runner will set it up,
// with real upstream servers on loopback: plain HTTP and HTTPS with a self-signed
// certificate for the test names.
type harness struct {
	t        testing.TB
	proxy    *Proxy
	sock     string
	resolver *fakeResolver
	reg      *prometheus.Registry
	plain    *httptest.Server
	secure   *httptest.Server
	pool     *x509.CertPool
	pport    uint16 // plain upstream's port
	sport    uint16 // TLS upstream's port

	mu     sync.Mutex
	seen   []seenRequest
	events []Event
	served chan struct{} // signalled when the proxy's Serve returns
}

const sandboxID = "sbx-test-1"

func newHarness(t testing.TB, configure func(*Options)) *harness {
	t.Helper()
	h := &harness{t: t, reg: prometheus.NewRegistry(), served: make(chan struct{})}
	h.plain = startUpstream(t, http.HandlerFunc(h.servePlain), nil)
	cert, pool := selfSigned(t)
	h.pool = pool
	h.secure = startUpstream(t, http.HandlerFunc(h.serveSecure), &tls.Config{Certificates: []tls.Certificate{cert}})
	h.pport, h.sport = port(h.plain.Listener.Addr()), port(h.secure.Listener.Addr())
	h.resolver = &fakeResolver{names: map[string][]netip.Addr{
		"allowed.test":   addrs(upstreamAddr),
		"other.test":     addrs(upstreamAddr),
		"ok.wild.test":   addrs(upstreamAddr),
		"evil.wild.test": addrs(upstreamAddr),
		"unlisted.test":  addrs(upstreamAddr),
		"rebind.test":    addrs("127.0.0.1"),
		"meta.test":      addrs("169.254.169.254"),
		"mapped.test":    addrs("::ffff:127.0.0.1"),
		"nat64.test":     addrs("64:ff9b::7f00:1"),
		"mixed.test":     addrs("127.0.0.1", "10.0.0.1", upstreamAddr),
	}}
	pol, err := policy.Load([]byte(testPolicy), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{
		Decider:          pol,
		Resolver:         h.resolver,
		Log:              slog.New(slog.DiscardHandler),
		Registerer:       h.reg,
		Audit:            h.audit,
		ConnectPorts:     []uint16{h.sport},
		HTTPPorts:        []uint16{h.pport},
		UnsafeAllowAddrs: []netip.Prefix{netip.MustParsePrefix(upstreamAddr + "/32")},
	}
	if configure != nil {
		configure(&o)
	}
	h.proxy = New(o)
	h.sock = filepath.Join(t.TempDir(), "egress.sock")
	l, err := net.Listen("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(h.served)
		if err := h.proxy.ServeSandbox(l, Sandbox{ID: sandboxID}); !errors.Is(err, ErrClosed) {
			t.Errorf("ServeSandbox returned %v, want ErrClosed", err)
		}
	}()
	t.Cleanup(func() {
		h.proxy.Close()
		<-h.served
	})
	return h
}

// startUpstream starts a real server on upstreamAddr, with TLS when cfg is set.
func startUpstream(t testing.TB, hd http.Handler, cfg *tls.Config) *httptest.Server {
	t.Helper()
	l, err := net.Listen("tcp", upstreamAddr+":0")
	if err != nil {
		t.Skipf("cannot listen on %s (the tests need a second loopback address): %v", upstreamAddr, err)
	}
	s := httptest.NewUnstartedServer(hd)
	s.Listener.Close()
	s.Listener = l
	// Handshakes the proxy cuts short (a refused ClientHello) are expected here.
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	if cfg != nil {
		s.TLS = cfg
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

func port(a net.Addr) uint16 { return uint16(a.(*net.TCPAddr).Port) }

// servePlain answers the plain upstream: /echo writes back what it got, /big?n= sends n
// bytes, /stream sends a first line then the rest when released.
func (h *harness) servePlain(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	h.seen = append(h.seen, seenRequest{Method: r.Method, URI: r.RequestURI, Host: r.Host, Header: r.Header.Clone(), Body: string(body)})
	h.mu.Unlock()
	switch r.URL.Path {
	case "/big":
		var n int64
		fmt.Sscan(r.URL.Query().Get("n"), &n)
		w.Header().Set("Content-Length", fmt.Sprint(n))
		writeZeros(w, n)
	case "/hop":
		// Raw, because net/http writes its own Connection header.
		c, bw, _ := w.(http.Hijacker).Hijack()
		defer c.Close()
		bw.WriteString("HTTP/1.1 200 OK\r\nConnection: close, X-Hop-Response\r\nX-Hop-Response: dropped\r\n" +
			"Keep-Alive: timeout=5\r\nProxy-Authenticate: Basic\r\nX-End: kept\r\nContent-Length: 2\r\n\r\nok")
		bw.Flush()
	case "/until-close":
		c, bw, _ := w.(http.Hijacker).Hijack()
		defer c.Close()
		bw.WriteString("HTTP/1.1 200 OK\r\nX-Framing: none\r\n\r\nbody until close")
		bw.Flush()
	case "/size":
		fmt.Fprintf(w, "%d", len(body))
	default:
		w.Header().Set("X-Upstream", "plain")
		fmt.Fprintf(w, "%s %s host=%s body=%s", r.Method, r.RequestURI, r.Host, body)
	}
}

var zeros = make([]byte, 1<<20)

func writeZeros(w io.Writer, n int64) {
	for n > 0 {
		k := min(n, int64(len(zeros)))
		if _, err := w.Write(zeros[:k]); err != nil {
			return
		}
		n -= k
	}
}

// serveSecure answers the TLS upstream with the server name the client asked for.
func (h *harness) serveSecure(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/big" {
		var n int64
		fmt.Sscan(r.URL.Query().Get("n"), &n)
		w.Header().Set("Content-Length", fmt.Sprint(n))
		writeZeros(w, n)
		return
	}
	fmt.Fprintf(w, "hello over TLS, sni=%s host=%s", r.TLS.ServerName, r.Host)
}

func (h *harness) audit(_ context.Context, e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
}

// eventsFor waits until the audit trail holds an event of the given stage for host and
// returns the trail's events for host so far.
func (h *harness) waitEvent(host string, stage Stage) Event {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.mu.Lock()
		for _, e := range h.events {
			if e.Host == host && e.Stage == stage {
				h.mu.Unlock()
				return e
			}
		}
		all := fmt.Sprintf("%+v", h.events)
		h.mu.Unlock()
		if time.Now().After(deadline) {
			h.t.Fatalf("no %s event for %q; events: %s", stage, host, all)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h *harness) lastSeen() seenRequest {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.seen) == 0 {
		h.t.Fatal("the upstream saw no request")
	}
	return h.seen[len(h.seen)-1]
}

// dial connects to the proxy's socket, as a program in the sandbox does through its
// loopback bridge.
func (h *harness) dial() net.Conn {
	h.t.Helper()
	c, err := net.Dial("unix", h.sock)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c
}

// client is an HTTP client that uses the proxy for every URL, as one with HTTP_PROXY and
// HTTPS_PROXY set does.
func (h *harness) client(proxyUser *url.Userinfo) *http.Client {
	tr := &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "egress.invalid:3128", User: proxyUser}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", h.sock)
		},
		TLSClientConfig: &tls.Config{RootCAs: h.pool},
	}
	h.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// raw sends a request as bytes and reads the proxy's response head (and body, when it
// has a length), returning the connection for what follows.
func (h *harness) raw(request string) (*http.Response, string, net.Conn, *bufio.Reader) {
	h.t.Helper()
	c := h.dial()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, request); err != nil {
		h.t.Fatal(err)
	}
	br := bufio.NewReader(c)
	method, _, _ := strings.Cut(request, " ")
	res, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		h.t.Fatalf("reading the proxy's answer to %q: %v", request, err)
	}
	body := ""
	if res.ContentLength >= 0 {
		b, _ := io.ReadAll(res.Body)
		body = string(b)
	}
	return res, body, c, br
}

// selfSigned makes a certificate for the test names and the pool that trusts it.
func selfSigned(t testing.TB) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "paddock egress test"},
		DNSNames:              []string{"allowed.test", "other.test", "*.wild.test"},
		IPAddresses:           []net.IP{net.ParseIP(upstreamAddr)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// counter reads a counter from the harness's registry.
func (h *harness) counter(name, label, value string) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
