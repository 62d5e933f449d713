package bench

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paddockhq/paddock/internal/egress"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/policy"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/agentclient"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

const (
	// downloadHost is the name the sandbox downloads from; the policy lists it.
	downloadHost = "download.bench.test"
	// Ports of the sandbox's loopback where the download server listens too, in the
	// sandbox's network namespace: the direct downloads' way to it.
	directTLSPort, directPlainPort = 8443, 8080
)

// downloadAddr is what the resolver answers for downloadHost: a public address, so that
// the proxy's address checks run and pass as for a real host. Nothing connects to it: the
// dialer takes it to the download server on the host's loopback.
var downloadAddr = netip.MustParseAddr("1.2.3.4")

// fetchResult is what internal/bench/fetch prints.
type fetchResult struct {
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	SHA256  string  `json:"sha256"`
	Proxy   string  `json:"proxy"`
	// CPUSeconds is the client's CPU time; HostCPU the harness process's (the server's,
	// and the proxy's when it was used) over the same download.
	CPUSeconds float64       `json:"cpu_seconds"`
	HostCPU    time.Duration `json:"-"`
}

// egressFixture is table 13's setup: a container sandbox under runc whose network
// namespace holds the egress proxy's listener on 127.0.0.1:3128, as the control plane
// arranges it (server.serveEgress), and a download server in the harness's process that
// listens on the host's loopback, where the proxy reaches it, and in the sandbox's
// namespace, where the sandbox reaches it directly.
type egressFixture struct {
	workspace string
	sb        *runner.Sandbox
	agent     *agentclient.Client
	proxy     *egress.Proxy
	servers   []*http.Server
	// listeners are the server's on the host's loopback (the sandbox's go with it).
	listeners []net.Listener
	size      int64
	sum       string // the body's SHA-256

	mu sync.Mutex
	in int64 // bytes the proxy carried to the sandbox, by its closed events
}

// startEgress starts the fixture with a body of size bytes.
func (e *Env) startEgress(ctx context.Context, size int64) (f *egressFixture, err error) {
	f = &egressFixture{size: size}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	body := make([]byte, size)
	rand.Read(body)
	h := sha256.Sum256(body)
	f.sum = hex.EncodeToString(h[:])
	cert, caPEM, err := selfSigned(downloadHost)
	if err != nil {
		return nil, err
	}
	if f.workspace, err = e.egressWorkspace(ctx, caPEM); err != nil {
		return nil, err
	}
	if f.sb, err = e.egressSandbox(ctx, f.workspace); err != nil {
		return nil, err
	}
	f.agent = f.sb.Agent()
	upstream, err := f.serve(body, cert, e.log)
	if err != nil {
		return nil, err
	}
	pol, err := policy.Load([]byte("network:\n  default: deny\n  allow: ["+downloadHost+"]\n"), "bench")
	if err != nil {
		return nil, err
	}
	f.proxy = egress.New(egress.Options{Decider: pol, Log: e.log, Registerer: prometheus.NewRegistry(), Audit: f.audit,
		Resolver: fixedResolver{downloadHost: downloadAddr}, Dialer: upstream})
	go f.proxy.ServeSandbox(f.sb.Listen(server.EgressPort, 0, e.log), egress.Sandbox{ID: f.sb.ID})
	return f, nil
}

// egressWorkspace makes the sandbox's workspace with the client (built static) and the
// download server's CA in it, before any process of the sandbox could touch it.
func (e *Env) egressWorkspace(ctx context.Context, caPEM []byte) (string, error) {
	ws, err := os.MkdirTemp(e.Dir, "egress")
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(ws, "fetch"), "github.com/paddockhq/paddock/internal/bench/fetch")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return ws, fmt.Errorf("build fetch: %v: %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(ws, "ca.pem"), caPEM, 0o644); err != nil {
		return ws, err
	}
	return ws, os.Chown(ws, int(e.Config.SandboxUID), int(e.Config.SandboxGID))
}

// egressSandbox creates the sandbox with the host listening on its loopback at the
// proxy's port and the direct ports, and the proxy's variables in its environment, as
// the control plane sets them (server.egressEnv).
func (e *Env) egressSandbox(ctx context.Context, workspace string) (*runner.Sandbox, error) {
	rc, err := e.runnerConfig("egress")
	if err != nil {
		return nil, err
	}
	rc.HostPorts = []int{server.EgressPort, directTLSPort, directPlainPort}
	u := fmt.Sprintf("http://127.0.0.1:%d", server.EgressPort)
	return runner.New(rc, e.log).Create(ctx, runner.Spec{User: benchUser, Tier: wire.TierContainer, Workspace: workspace,
		Main: []string{"sleep", "3600"},
		Env: []string{"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "http_proxy=" + u, "https_proxy=" + u,
			"NO_PROXY=127.0.0.1,localhost,::1", "no_proxy=127.0.0.1,localhost,::1"}})
}

// serve serves body over HTTPS and plain HTTP in the sandbox's namespace, on the direct
// ports, and on the host's loopback, where the returned dialer takes the proxy.
func (f *egressFixture) serve(body []byte, cert tls.Certificate, log *slog.Logger) (redirectDialer, error) {
	var direct [2]net.Listener
	for i, p := range []int{directTLSPort, directPlainPort} {
		// The host's own listener in the namespace: nothing relays the direct downloads.
		l, ok := f.sb.Listen(p, 0, log).(*net.TCPListener)
		if !ok {
			return nil, fmt.Errorf("the host does not listen in sandbox %s's network namespace (table 13 needs the container tier under runc): %w", f.sb.ID, errdefs.ErrUnavailable)
		}
		direct[i] = l
	}
	var host [2]net.Listener
	for i := range host {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		host[i] = l
		f.listeners = append(f.listeners, l)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	})
	conf := &tls.Config{Certificates: []tls.Certificate{cert}}
	quiet := slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)
	f.servers = []*http.Server{{Handler: handler, ErrorLog: quiet}, {Handler: handler, ErrorLog: quiet}}
	go f.servers[0].Serve(tls.NewListener(direct[0], conf))
	go f.servers[0].Serve(tls.NewListener(host[0], conf))
	go f.servers[1].Serve(direct[1])
	go f.servers[1].Serve(host[1])
	return redirectDialer{
		netip.AddrPortFrom(downloadAddr, 443): host[0].Addr().String(),
		netip.AddrPortFrom(downloadAddr, 80):  host[1].Addr().String(),
	}, nil
}

// Close stops the proxy and the servers and destroys the sandbox.
func (f *egressFixture) Close() {
	if f.proxy != nil {
		f.proxy.Close()
	}
	for _, s := range f.servers {
		s.Close()
	}
	for _, l := range f.listeners {
		l.Close()
	}
	if f.sb != nil {
		_ = f.sb.Destroy(context.Background())
	}
	if f.workspace != "" {
		os.RemoveAll(f.workspace)
	}
}

// audit counts what the proxy carried to the sandbox, so that a proxied download is known
// to have gone through it.
func (f *egressFixture) audit(_ context.Context, ev egress.Event) {
	if ev.Stage == egress.StageClosed {
		f.mu.Lock()
		f.in += ev.BytesIn
		f.mu.Unlock()
	}
}

func (f *egressFixture) carried() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.in
}

// download runs the client in the sandbox once: through paddock's proxy when connect and
// peer are "", through the peer proxy at URL peer, else straight to connect on the
// sandbox's loopback. It checks that the whole body arrived (and its hash, with sum), and
// through paddock's proxy that the proxy carried it.
func (f *egressFixture) download(ctx context.Context, url, connect, peer string, sum bool) (fetchResult, error) {
	argv := []string{wire.WorkspacePath + "/fetch", "-url", url, "-ca", wire.WorkspacePath + "/ca.pem"}
	switch {
	case connect != "":
		argv = append(argv, "-connect", connect)
	case peer != "":
		argv = append(argv, "-proxy", peer)
	}
	if sum {
		argv = append(argv, "-sum")
	}
	before, cpu := f.carried(), selfCPU()
	resp, err := f.agent.Execute(ctx, &pb.ExecuteRequest{Argv: argv, TimeoutMs: uint64((5 * time.Minute).Milliseconds())})
	cpu = selfCPU() - cpu
	if err != nil {
		return fetchResult{}, fmt.Errorf("fetch %s: %w", url, err)
	}
	var r fetchResult
	if st := resp.GetStatus(); st.GetExitCode() != 0 || st.GetError() != "" || json.Unmarshal(resp.GetStdout(), &r) != nil {
		return fetchResult{}, fmt.Errorf("fetch %s: %v: %s %s", url, st, resp.GetStdout(), strings.TrimSpace(string(resp.GetStderr())))
	}
	r.HostCPU = cpu
	switch {
	case r.Bytes != f.size:
		return r, fmt.Errorf("fetch %s: %d bytes arrived, want %d", url, r.Bytes, f.size)
	case sum && r.SHA256 != f.sum:
		return r, fmt.Errorf("fetch %s: the body's SHA-256 is %s, want %s", url, r.SHA256, f.sum)
	case connect == "" && r.Proxy == "":
		return r, fmt.Errorf("fetch %s: the download did not go through the proxy", url)
	case connect == "" && peer == "":
		if got := f.waitCarried(before, f.size); got < f.size {
			return r, fmt.Errorf("fetch %s: the proxy carried %d bytes to the sandbox, want at least %d", url, got, f.size)
		}
	}
	return r, nil
}

// waitCarried waits a little for the proxy to have carried n bytes since it had carried
// from, and returns what it carried: it records a tunnel once both directions are done,
// which can be just after the client has exited.
func (f *egressFixture) waitCarried(from, n int64) int64 {
	for deadline := time.Now().Add(5 * time.Second); f.carried()-from < n && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	return f.carried() - from
}

// selfCPU is the user and system time the harness's process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// fixedResolver answers from a table, as a DNS server would for the listed names.
type fixedResolver map[string]netip.Addr

func (r fixedResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return []netip.Addr{a}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// redirectDialer connects the addresses it knows to local ones, as a route to them would,
// and refuses the rest. It stands in for the proxy's default dialer, which would refuse
// the local address once more just before connect(2).
type redirectDialer map[netip.AddrPort]string

func (d redirectDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(address)
	to, ok := d[ap]
	if err != nil || !ok {
		return nil, fmt.Errorf("no route to %s in the benchmark: %w", address, errdefs.ErrPermissionDenied)
	}
	nd := net.Dialer{KeepAlive: 30 * time.Second}
	return nd.DialContext(ctx, network, to)
}

// selfSigned makes a certificate for host, signed by itself, and its PEM for the client.
func selfSigned(host string) (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		// The peer proxies are sent to the server's loopback address in the sandbox (they
		// resolve no name the bench could give them).
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// EgressTable compares a download from inside a sandbox through the egress proxy with the
// same download straight to the same server, over HTTPS and over plain HTTP.
func (e *Env) EgressTable(ctx context.Context, o Options) (*Table, error) {
	f, err := e.startEgress(ctx, o.EgressBytes)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	peers, closePeers := e.startForwardProxies(ctx, f)
	defer closePeers()
	rec := newRecorder()
	variant := func(name, url, connect, peer string) func() error {
		return func() error {
			// The warm-up round checks the body's hash; the timed rounds its length.
			r, err := f.download(ctx, url, connect, peer, !rec.on)
			if err != nil {
				return err
			}
			client, host := 1000*r.CPUSeconds, ms(r.HostCPU)
			rec.add(name, float64(r.Bytes)/(1<<20)/r.Seconds)
			rec.add(name+".client", client)
			rec.add(name+".host", host)
			rec.add(name+".cpu", client+host)
			return nil
		}
	}
	secure, plain := "https://"+downloadHost+"/blob", "http://"+downloadHost+"/blob"
	fns := []func() error{
		variant("https.proxy", secure, "", ""),
		variant("https.direct", secure, fmt.Sprintf("127.0.0.1:%d", directTLSPort), ""),
		variant("http.proxy", plain, "", ""),
		variant("http.direct", plain, fmt.Sprintf("127.0.0.1:%d", directPlainPort), ""),
	}
	peerSecure, peerPlain := fmt.Sprintf("https://127.0.0.1:%d/blob", directTLSPort), fmt.Sprintf("http://127.0.0.1:%d/blob", directPlainPort)
	for _, p := range peers {
		fns = append(fns, p.round(variant("https."+p.name, peerSecure, "", p.URL)), p.round(variant("http."+p.name, peerPlain, "", p.URL)))
	}
	if err := interleave(rec, 1, o.EgressRounds, fns...); err != nil {
		return nil, err
	}
	sp, sd := rec.summary("https.proxy"), rec.summary("https.direct")
	pp, pd := rec.summary("http.proxy"), rec.summary("http.direct")
	sAdded, pAdded := paired(rec, "https.proxy.cpu", "https.direct.cpu"), paired(rec, "http.proxy.cpu", "http.direct.cpu")
	size := sizeName(o.EgressBytes)
	// The targets are the best forward peer's ratio to direct on each protocol.
	var fwd []*peer
	for _, p := range peers {
		fwd = append(fwd, p.peer)
	}
	sBar := bestPeer(fwd, func(name string) float64 { return rec.summary("https." + name).P50 })
	pBar := bestPeer(fwd, func(name string) float64 { return rec.summary("http." + name).P50 })
	t := &Table{
		Title: fmt.Sprintf("13. Downloading %s from inside a sandbox through the egress proxy against the same download direct", size),
		About: fmt.Sprintf("A static Go client (internal/bench/fetch) run with `Execute` in a container sandbox (runc) GETs a %s body (random bytes, "+
			"served from memory by a Go HTTP server in the harness's process) and reads it to the end in 256 KiB reads. *Through the proxy*: "+
			"the URL is `https://%s/blob` (or `http://`) and the client goes through `HTTPS_PROXY=http://127.0.0.1:%d` (or `HTTP_PROXY`), as "+
			"the control plane sets them; there the egress proxy (internal/egress, with a network policy listing the host, metrics and an audit sink) "+
			"listens itself, in the sandbox's network namespace, as the control plane does under runc; it opens a CONNECT tunnel (or forwards "+
			"the plain request) and dials the server on the host's loopback. *Direct*: the same client, URL and certificate, dialing the same server "+
			"where it also listens in the sandbox's namespace (ports %d and %d of its loopback). Both legs speak HTTP/1.1, over TLS 1.3 for HTTPS. "+
			"Rates are MiB/s of body from just before the request (connection, handshake and CONNECT included) to its last byte, as the client "+
			"times them. %d rounds of the four variants, interleaved, after a warm-up round; every download must deliver exactly %d bytes, the "+
			"warm-up's must have the body's SHA-256, and every proxied one must show in the proxy's audit trail as a closed exchange that carried them. "+
			"The *breakdown* rows are CPU time per download: the client's (getrusage in the client) and the harness process's (the server's, "+
			"and the proxy's when it is used); the *added* rows are the per-round difference of their sums, proxy − direct. The *peer* rows are "+
			forwardProxiesAbout+" Their ratio column is the peer against direct, then paddock's proxy against the peer.",
			size, downloadHost, server.EgressPort, directTLSPort, directPlainPort, o.EgressRounds, o.EgressBytes),
		Rows: []Row{
			{Name: "HTTPS through the proxy (CONNECT tunnel)", Unit: "MiB/s", Summary: sp, Ratio: ratio(sp.P50, sd.P50), Target: sBar.target(sd.P50), Met: sBar.met(sp.P50)},
			{Name: "HTTPS direct", Unit: "MiB/s", Summary: sd, Ratio: "1.00× (baseline)"},
			{Name: "plain HTTP through the proxy (forwarded request)", Unit: "MiB/s", Summary: pp, Ratio: ratio(pp.P50, pd.P50), Target: pBar.target(pd.P50), Met: pBar.met(pp.P50)},
			{Name: "plain HTTP direct", Unit: "MiB/s", Summary: pd, Ratio: "1.00× (baseline)"},
		},
	}
	var vs []string
	for _, p := range peers {
		ps, pp2 := rec.summary("https."+p.name), rec.summary("http."+p.name)
		t.Rows = append(t.Rows,
			p.row(Row{Name: "*peer:* HTTPS through " + p.name + " (CONNECT tunnel)", Unit: "MiB/s", Summary: ps, Ratio: vsPeer(ps.P50, sd.P50, "direct", sp.P50)}),
			p.row(Row{Name: "*peer:* plain HTTP through " + p.name + " (forwarded request)", Unit: "MiB/s", Summary: pp2, Ratio: vsPeer(pp2.P50, pd.P50, "direct", pp.P50)}))
		if p.missing != "" {
			vs = append(vs, fmt.Sprintf("%s not measured (%s)", p.name, p.missing))
			continue
		}
		vs = append(vs, fmt.Sprintf("%s %.0f MiB/s over HTTPS and %.0f MiB/s over plain HTTP (%s and %s of direct; paddock's proxy %s and %s of it)",
			p.name, ps.P50, pp2.P50, ratio(ps.P50, sd.P50), ratio(pp2.P50, pd.P50), ratio(sp.P50, ps.P50), ratio(pp.P50, pp2.P50)))
	}
	for _, v := range []struct{ key, name, host string }{
		{"https.proxy", "HTTPS through the proxy", "server and proxy"}, {"https.direct", "HTTPS direct", "server"},
		{"http.proxy", "plain HTTP through the proxy", "server and proxy"}, {"http.direct", "plain HTTP direct", "server"},
	} {
		t.Rows = append(t.Rows,
			Row{Name: "*breakdown:* " + v.name + ": the client's CPU time", Unit: "ms", Summary: rec.summary(v.key + ".client")},
			Row{Name: "*breakdown:* " + v.name + ": the harness process's CPU time (" + v.host + ")", Unit: "ms", Summary: rec.summary(v.key + ".host")})
	}
	t.Rows = append(t.Rows,
		Row{Name: "*added* CPU time per download over HTTPS, proxy − direct", Unit: "ms", Summary: sAdded},
		Row{Name: "*added* CPU time per download over plain HTTP, proxy − direct", Unit: "ms", Summary: pAdded})
	gib := float64(o.EgressBytes) / (1 << 30)
	cpu := func(key string) float64 { return rec.summary(key + ".cpu").P50 }
	// busy is how many CPUs a variant kept busy at the median: its CPU time over its time.
	busy := func(key string, rate Summary) float64 {
		return cpu(key) / 1000 / (float64(o.EgressBytes) / (1 << 20) / rate.P50)
	}
	added := func(key, part string) float64 {
		return rec.summary(key+".proxy."+part).P50 - rec.summary(key+".direct."+part).P50
	}
	t.Notes = []string{
		fmt.Sprintf("Over HTTPS the sandbox downloads %.0f MiB/s through the proxy against %.0f MiB/s direct (%s; target %s: %s); over plain HTTP %.0f "+
			"against %.0f MiB/s (%s; target %s: %s). The targets are the best forward peer's ratio in the same rounds; the absolute rates are information.",
			sp.P50, sd.P50, ratio(sp.P50, sd.P50), sBar.target(sd.P50), sBar.word(sp.P50),
			pp.P50, pd.P50, ratio(pp.P50, pd.P50), pBar.target(pd.P50), pBar.word(pp.P50)),
		fmt.Sprintf("The client, the server (which encrypts, for HTTPS) and the proxy share this machine's %d CPUs, so a download's rate is the CPUs it "+
			"keeps busy over the CPU time it needs per byte. Over HTTPS a proxied download needs %s the CPU time of a direct one (%.0f ms against %.0f ms, "+
			"medians) and keeps %.1f CPUs busy against %.1f; over plain HTTP %s (%.0f ms against %.0f ms), %.1f CPUs against %.1f. Per round, the proxied "+
			"download took %.0f ms more CPU over HTTPS (%.2f s per GiB) and %.0f ms more over plain HTTP (%.2f s per GiB), at the median; by the medians "+
			"of the breakdown rows, %.0f ms and %.0f ms of that are in the harness's process and %.0f ms and %.0f ms in the client, which receives the "+
			"same bytes over one connection either way. A proxied download crosses two loopback TCP connections (the sandbox's to the proxy, the proxy's "+
			"to the server) where a direct one crosses one: the proxy relays the body with splice(2), so its bytes never enter the proxy's memory, but "+
			"the second connection's TCP work is the kernel's to do all the same. Over a network link slower than this, the rate is the link's, and "+
			"the proxy's cost is that CPU time.",
			runtime.NumCPU(), ratio(cpu("https.proxy"), cpu("https.direct")), cpu("https.proxy"), cpu("https.direct"), busy("https.proxy", sp), busy("https.direct", sd),
			ratio(cpu("http.proxy"), cpu("http.direct")), cpu("http.proxy"), cpu("http.direct"), busy("http.proxy", pp), busy("http.direct", pd),
			sAdded.P50, sAdded.P50/1000/gib, pAdded.P50, pAdded.P50/1000/gib,
			added("https", "host"), added("http", "host"), added("https", "client"), added("http", "client")),
		fmt.Sprintf("What is real and what is not: the proxy is internal/egress's own code path (request parsing, the policy, the address checks, the "+
			"ClientHello's server name check, the relay, the counters and audit events), on the host's own listener in the sandbox's namespace "+
			"as under `paddock serve`. Its Resolver answers %s with %s, a public address, so the address checks pass as for a real host; its Dialer "+
			"connects that address's ports 443 and 80 to the server's loopback ports, in place of the default dialer, which would check the address once "+
			"more and refuse loopback. Not included: real DNS and a real network. To run this table alone: `make build`, then, as root, "+
			"`go run ./internal/bench/cmd -only egress` (-egress-rounds and -egress-bytes change its size).", downloadHost, downloadAddr),
	}
	t.Notes = append(t.Notes[:1], append([]string{"Against the peers, same client, same body, same rounds: " + strings.Join(vs, "; ") + "."}, t.Notes[1:]...)...)
	return t, nil
}
