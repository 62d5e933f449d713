package bench

// Peers are the programs a user would pick instead of a part of paddock, measured in the
// same interleaved rounds as paddock: podman, bubblewrap and runsc beside runc (table 1),
// nginx and haproxy in front of the same app (table 5; nginx's WebSocket proxying, table 6),
// squid and tinyproxy as forward proxies for the same download (table 13). Each is Debian's build, installed by
// scripts/setup.sh; the bench writes its configuration under its own directory, starts it
// on loopback and stops it when the table is done.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/netns"
)

// peer is one peer in one table: measured, or why not.
type peer struct {
	name string
	// missing says why the peer is not measured; "" while it is.
	missing string
}

// lookPeer finds a peer's program on PATH, or says in p.missing that it is not installed.
func lookPeer(name, bin string) (*peer, string) {
	p := &peer{name: name}
	path, err := exec.LookPath(bin)
	if err != nil {
		p.missing = bin + " is not installed (scripts/setup.sh installs it from Debian)"
	}
	return p, path
}

// fail marks the peer unmeasured with why, once.
func (p *peer) fail(err error) {
	if p.missing == "" && err != nil {
		p.missing = err.Error()
	}
}

// round wraps one of the peer's samples: a peer that failed is skipped from then on and its
// rows say why, instead of failing the table (a peer's fault is not paddock's figure).
func (p *peer) round(fn func() error) func() error {
	return func() error {
		if p.missing == "" {
			if err := fn(); err != nil {
				p.fail(fmt.Errorf("failed while measured: %w", err))
			}
		}
		return nil
	}
}

// row is the peer's row of a table: the figures, or why there are none.
func (p *peer) row(r Row) Row {
	if p.missing != "" {
		r.Summary, r.Ratio, r.Missing = Summary{}, "", p.missing
	}
	return r
}

// vsPeer is the ratio column of a peer's row: the peer against the floor, and paddock's
// figure against the peer's.
func vsPeer(peerP50, floorP50 float64, floor string, paddockP50 float64) string {
	return ratio(peerP50, floorP50) + " " + floor + "; paddock " + ratio(paddockP50, peerP50) + " of it"
}

// bar is a target that peers measured in the same run set: the best of them, where higher
// is better (a rate).
type bar struct {
	name  string // the best peer; "" when none was measured
	value float64
}

// bestPeer is the best of the measured peers by value.
func bestPeer(peers []*peer, value func(name string) float64) bar {
	var b bar
	for _, p := range peers {
		if v := value(p.name); p.missing == "" && (b.name == "" || v > b.value) {
			b = bar{name: p.name, value: v}
		}
	}
	return b
}

// target is the target column: at least the best peer's ratio to floor.
func (b bar) target(floor float64) string {
	if b.name == "" {
		return "≥ the best peer's ratio"
	}
	return fmt.Sprintf("≥ the best peer's ratio (%s, %s)", b.name, ratio(b.value, floor))
}

// met is the met column for paddock's figure v: "—" when no peer was measured.
func (b bar) met(v float64) string {
	if b.name == "" {
		return "—"
	}
	return yesNo(v >= b.value)
}

// word says in a sentence whether v meets the bar.
func (b bar) word(v float64) string {
	if b.name == "" {
		return "not judged, no peer measured"
	}
	return metWord(v >= b.value)
}

// daemon is a peer's server process; Close stops it and whatever it started.
type daemon struct {
	name   string
	cmd    *exec.Cmd
	log    string // its stdout and stderr
	exited chan struct{}
}

// startDaemon runs argv in a process group of its own, output to logPath, and waits until
// ready succeeds (the peer answers) or it exits.
func startDaemon(ctx context.Context, name, logPath string, argv []string, ready func(context.Context) error) (*daemon, error) {
	out, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	d := &daemon{name: name, cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(d.exited)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rerr := ready(ctx)
		if rerr == nil {
			return d, nil
		}
		select {
		case <-d.exited:
			return nil, fmt.Errorf("%s exited as it started (%s): %s", name, cmd.ProcessState, d.tail())
		default:
		}
		if time.Now().After(deadline) {
			d.Close()
			return nil, fmt.Errorf("%s was not ready after 30 s: %v: %s", name, rerr, d.tail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tail is the end of the daemon's log, on one line.
func (d *daemon) tail() string {
	b, _ := os.ReadFile(d.log)
	return strings.Join(strings.Fields(tail(string(b))), " ")
}

// Close sends SIGTERM to the daemon's process group, SIGKILL after 10 s, and SIGKILL to
// whatever of the group is left once its leader has exited.
func (d *daemon) Close() {
	pgid := d.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-d.exited
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// freePort is a TCP port of the host's loopback that nothing listened on a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// dialReady is a readiness check: a TCP connection to addr is accepted.
func dialReady(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	}
}

// peerDir is a new directory under the environment's for one peer's configuration, logs
// and state, traversable by the unprivileged users the peers drop to.
func (e *Env) peerDir(name string) (string, error) {
	dir, err := os.MkdirTemp(e.Dir, name)
	if err != nil {
		return "", err
	}
	return dir, os.Chmod(dir, 0o755)
}

// reverseProxy is a peer started in front of an app on the host's loopback.
type reverseProxy struct {
	*peer
	d   *daemon
	URL string // the peer's base URL
}

func (r *reverseProxy) Close() {
	if r.d != nil {
		r.d.Close()
	}
}

// nginxConf is nginx's configuration as a reverse proxy to upstream that does what
// paddock's proxy contract asks: drops Cookie and Authorization, keeps connections to the
// app alive, one worker per CPU. A WebSocket upgrade passes (table 6): Upgrade is sent on
// and Connection is "upgrade" for it, empty (kept alive) for every other request.
func nginxConf(dir string, port int, upstream string) string {
	return fmt.Sprintf(`daemon off;
master_process on;
worker_processes auto;
user nobody nogroup;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    map $http_upgrade $connection_upgrade {
        default upgrade;
        "" "";
    }
    upstream app {
        server %[3]s;
        keepalive 32;
    }
    server {
        listen 127.0.0.1:%[2]d;
        location / {
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_set_header Cookie "";
            proxy_set_header Authorization "";
            proxy_buffering on;
        }
    }
}
`, dir, port, upstream)
}

// haproxyConf is haproxy's configuration as the same reverse proxy: HTTP mode, Cookie and
// Authorization deleted, server connections reused, one thread per CPU (its default).
func haproxyConf(port int, upstream string) string {
	return fmt.Sprintf(`global
    maxconn 4096
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    option http-keep-alive
    http-reuse always
frontend bench
    bind 127.0.0.1:%d
    http-request del-header Cookie
    http-request del-header Authorization
    default_backend app
backend app
    server app %s
`, port, upstream)
}

// reverseProxiesAbout says what table 5's peers are and how the bench configures them.
const reverseProxiesAbout = "Debian's nginx and haproxy in front of the direct app on the host's loopback, each as its own process with a " +
	"configuration the bench writes: they drop `Cookie` and `Authorization` from the request and keep connections to the app alive, as paddock's " +
	"proxy contract asks. nginx: `worker_processes auto` (one per CPU), `upstream` with `keepalive 32`, `proxy_http_version 1.1` and an empty " +
	"`Connection` header (`upgrade`, with `Upgrade` passed on, for a WebSocket), `proxy_set_header Cookie \"\"` and `Authorization \"\"`, no access log. haproxy: `mode http`, its default one thread per CPU, " +
	"`option http-keep-alive`, `http-reuse always`, `http-request del-header Cookie` and `Authorization`."

// startReverseProxy starts peer name (nginx or haproxy) in front of upstream (host:port).
func (e *Env) startReverseProxy(ctx context.Context, name, upstream string) *reverseProxy {
	bin := map[string]string{"nginx": "nginx", "haproxy": "haproxy"}[name]
	p, path := lookPeer(name, bin)
	r := &reverseProxy{peer: p}
	if p.missing != "" {
		return r
	}
	err := func() error {
		dir, err := e.peerDir(name)
		if err != nil {
			return err
		}
		port, err := freePort()
		if err != nil {
			return err
		}
		conf := filepath.Join(dir, name+".conf")
		var text string
		var argv []string
		switch name {
		case "nginx":
			text, argv = nginxConf(dir, port, upstream), []string{path, "-p", dir, "-c", conf}
		default:
			text, argv = haproxyConf(port, upstream), []string{path, "-db", "-f", conf}
		}
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			return err
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		r.d, err = startDaemon(ctx, name, filepath.Join(dir, "out.log"), argv, dialReady(addr))
		r.URL = "http://" + addr
		return err
	}()
	if err != nil {
		p.fail(fmt.Errorf("could not start: %w", err))
	}
	return r
}

// forwardProxy is a peer forward proxy started in a sandbox's network namespace, where the
// sandbox's client reaches it on its own loopback.
type forwardProxy struct {
	*peer
	d   *daemon
	URL string // http://127.0.0.1:port, as the sandbox sees it
}

func (f *forwardProxy) Close() {
	if f.d != nil {
		f.d.Close()
	}
}

// squidConf is squid's configuration as a plain forward proxy: any destination and port,
// CONNECT included, no cache, no access log.
func squidConf(dir string, port int) string {
	return fmt.Sprintf(`http_port 127.0.0.1:%[2]d
http_access allow all
cache deny all
cache_mem 0 MB
access_log none
cache_log %[1]s/cache.log
cache_store_log none
pid_filename %[1]s/squid.pid
coredump_dir %[1]s
netdb_filename none
pinger_enable off
icp_port 0
htcp_port 0
shutdown_lifetime 0 seconds
visible_hostname bench
via off
forwarded_for delete
cache_effective_user proxy
cache_effective_group proxy
`, dir, port)
}

// tinyproxyConf is tinyproxy's configuration as the same forward proxy: CONNECT allowed to
// the download server's port.
func tinyproxyConf(dir string, port, connectPort int) string {
	return fmt.Sprintf(`User nobody
Group nogroup
Port %[2]d
Listen 127.0.0.1
Timeout 600
MaxClients 100
LogFile "%[1]s/tinyproxy.log"
LogLevel Error
DisableViaHeader Yes
ConnectPort %[3]d
`, dir, port, connectPort)
}

// startForwardProxy starts peer name (squid or tinyproxy) in the network namespace at
// nsPath, listening on port of its loopback; ready dials that port there.
func (e *Env) startForwardProxy(ctx context.Context, name, nsPath string, port, connectPort int, ready func(context.Context) error) *forwardProxy {
	p, path := lookPeer(name, name)
	f := &forwardProxy{peer: p, URL: "http://127.0.0.1:" + strconv.Itoa(port)}
	if p.missing != "" {
		return f
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		p.fail(errors.New("nsenter (util-linux) is not installed: the peer cannot join the sandbox's network namespace"))
		return f
	}
	err = func() error {
		dir, err := e.peerDir(name)
		if err != nil {
			return err
		}
		// Both drop to an unprivileged user before they open their logs.
		owner := map[string]string{"squid": "proxy", "tinyproxy": "nobody"}[name]
		if u, err := user.Lookup(owner); err == nil {
			uid, _ := strconv.Atoi(u.Uid)
			gid, _ := strconv.Atoi(u.Gid)
			if err := os.Chown(dir, uid, gid); err != nil {
				return err
			}
		}
		conf := filepath.Join(dir, name+".conf")
		var text string
		var argv []string
		switch name {
		case "squid":
			text, argv = squidConf(dir, port), []string{path, "-N", "-f", conf}
		default:
			text, argv = tinyproxyConf(dir, port, connectPort), []string{path, "-d", "-c", conf}
		}
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			return err
		}
		argv = append([]string{nsenter, "--net=" + nsPath, "--"}, argv...)
		f.d, err = startDaemon(ctx, name, filepath.Join(dir, "out.log"), argv, ready)
		return err
	}()
	if err != nil {
		p.fail(fmt.Errorf("could not start: %w", err))
	}
	return f
}

// Ports of the sandbox's loopback where the peer forward proxies listen.
const squidPort, tinyproxyPort = 3129, 3130

// forwardProxiesAbout says what table 13's peers are and how the bench configures them.
const forwardProxiesAbout = "Debian's squid and tinyproxy as forward proxies, each started by the bench with `nsenter --net` in the sandbox's " +
	"network namespace (listening on its loopback, ports 3129 and 3130), as paddock's proxy listens there, with a configuration the bench writes; " +
	"the same client goes through them with `-proxy http://127.0.0.1:PORT` to `https://127.0.0.1:8443/blob` (CONNECT) and `http://127.0.0.1:8080/blob` " +
	"(the download server's listeners in the namespace, the certificate naming 127.0.0.1 too: the peers are given no name resolution). " +
	"squid: `http_access allow all`, `cache deny all`, `cache_mem 0 MB`, no access log, `via off`, one process (`-N`). tinyproxy: " +
	"`ConnectPort 8443`, `LogLevel Error`, `DisableViaHeader Yes`, `MaxClients 100`. Neither checks a policy or an address; a peer's download " +
	"is checked by its length (and the warm-up's by its hash), not by an audit trail."

// startForwardProxies starts squid and tinyproxy in the network namespace of f's sandbox;
// the returned func stops them.
func (e *Env) startForwardProxies(ctx context.Context, f *egressFixture) ([]*forwardProxy, func()) {
	nsPath, h, err := sandboxNetNS(f)
	var peers []*forwardProxy
	for _, v := range []struct {
		name string
		port int
	}{{"squid", squidPort}, {"tinyproxy", tinyproxyPort}} {
		if err != nil {
			p, _ := lookPeer(v.name, v.name)
			p.fail(fmt.Errorf("could not open the sandbox's network namespace: %w", err))
			peers = append(peers, &forwardProxy{peer: p})
			continue
		}
		addr := "127.0.0.1:" + strconv.Itoa(v.port)
		ready := func(ctx context.Context) error {
			c, err := h.Dial(ctx, addr)
			if err == nil {
				c.Close()
			}
			return err
		}
		peers = append(peers, e.startForwardProxy(ctx, v.name, nsPath, v.port, directTLSPort, ready))
	}
	return peers, func() {
		for _, p := range peers {
			p.Close()
		}
		if h != nil {
			h.Close()
		}
	}
}

// sandboxNetNS is the path of the network namespace of f's sandbox (by a process of its
// cgroup) and an open handle on it.
func sandboxNetNS(f *egressFixture) (string, *netns.Handle, error) {
	g, err := cgroups.Load(f.sb.Cgroup())
	if err != nil {
		return "", nil, err
	}
	pids, err := g.Pids()
	if err != nil {
		return "", nil, err
	}
	if len(pids) == 0 {
		return "", nil, errors.New("no process in the sandbox's cgroup")
	}
	path := "/proc/" + strconv.Itoa(pids[0]) + "/ns/net"
	h, err := netns.Open(path)
	return path, h, err
}
