package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/paddockhq/paddock/internal/agent/desktop"
	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/origins"
	"github.com/paddockhq/paddock/internal/sandbox/agentclient"
	"github.com/paddockhq/paddock/internal/server"
)

// desktopApp serves the workspace's files (index.html at /): the app of the desktop
// table's sandboxes, so that an undo shows in the preview.
const desktopApp = `use IO::Socket::INET;
$SIG{CHLD} = 'IGNORE';
my $s = IO::Socket::INET->new(LocalPort => 8080, Listen => 64, ReuseAddr => 1) or die "listen: $!";
while (1) {
  my $c = $s->accept or next;
  if (fork()) { close $c; next }
  alarm 30;
  my $req = <$c> // exit;
  while (my $l = <$c>) { last if $l =~ /^\r?\n$/ }
  my ($path) = $req =~ m{^\S+ /([^ ?]*)};
  $path =~ s/[^A-Za-z0-9._-]//g;
  $path = "index.html" if $path eq "";
  my ($code, $body) = ("404 Not Found", "not found\n");
  if (open(my $f, "<", "/workspace/$path")) { local $/; $body = <$f>; $code = "200 OK" }
  print $c "HTTP/1.0 $code\r\nContent-Type: text/html\r\nCache-Control: no-store\r\nContent-Length: " . length($body) . "\r\nConnection: close\r\n\r\n$body";
  close $c;
  exit;
}
`

// desktopFixture is the desktop table's control plane, its user's live sandbox, the
// browser script that drives the desktop, and the same sandbox's agent reached directly.
type desktopFixture struct {
	cp      *ControlPlane
	sandbox string
	session string // the browser's terminal's
	token   string
	agent   *agentclient.Client
	*browserScript
	// direct is the terminal's session attached to without the control plane: its output.
	direct chan []byte
	// ws is the same session attached to through the control plane's exec stream, by the
	// harness's own WebSocket client; proxied is its output.
	ws      *websocket.Conn
	proxied chan []byte
}

// DesktopTable times the desktop as a person uses it, in Chromium, against what the same
// takes without it, interleaved: signing in to the desktop against signing in to the app's
// page; a keystroke's echo in the terminal against the same PTY's echo through the agent's
// own channel; an undo clicked until the preview shows it against `paddock undo` until the
// app serves it, and until the app's own tab, reloaded, shows it. It also weighs the desktop's assets and reads the agent's VmRSS.
func (e *Env) DesktopTable(ctx context.Context, o Options) (t *Table, err error) {
	f, err := e.startDesktop(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	static, err := e.startStaticDesktop()
	if err != nil {
		return nil, err
	}
	defer static.Close()
	rec := newRecorder()
	round := 0
	err = interleave(rec, o.Warmup, o.N,
		func() error {
			a, err := f.ask(map[string]any{"op": "welcome"})
			rec.add("welcome", a.MS)
			return err
		},
		func() error {
			a, err := f.ask(map[string]any{"op": "static", "url": static.URL + "/"})
			rec.add("static", a.MS)
			rec.add("static.bytes", float64(a.Bytes)/1000)
			return err
		},
		func() error {
			a, err := f.ask(map[string]any{"op": "desktop"})
			rec.add("desktop", a.MS)
			rec.add("assets", float64(a.Bytes)/1000)
			return err
		},
		func() error {
			a, err := f.ask(map[string]any{"op": "key", "key": "x"})
			rec.add("key.proxy", a.MS)
			if err != nil {
				return err
			}
			_, err = f.ask(map[string]any{"op": "key", "key": "Backspace"})
			return err
		},
		func() error {
			d, err := f.proxiedKey(ctx, 'w')
			rec.add("key.ws", ms(d))
			if err != nil {
				return err
			}
			_, err = f.proxiedKey(ctx, 0x7f)
			return err
		},
		func() error {
			d, err := f.directKey(ctx, 'y')
			rec.add("key.direct", ms(d))
			if err != nil {
				return err
			}
			_, err = f.directKey(ctx, 0x7f)
			return err
		},
		func() error {
			round++
			before, after := fmt.Sprintf("bench-undo-%d-before", round), fmt.Sprintf("bench-undo-%d-after", round)
			if err := f.twoCheckpoints(ctx, before, after); err != nil {
				return err
			}
			if _, err := f.ask(map[string]any{"op": "preview", "want": after}); err != nil {
				return err
			}
			a, err := f.ask(map[string]any{"op": "undo", "want": before})
			rec.add("undo.desktop", a.MS)
			if err != nil {
				var h json.RawMessage
				_ = f.cp.JSON(ctx, "GET", "/api/v1/sandboxes/"+f.sandbox+"/history", nil, http.StatusOK, &h)
				aerr := f.appShows(ctx, before)
				return fmt.Errorf("%w (the app: %v; history %s)", err, aerr, h)
			}
			return nil
		},
		func() error {
			round++
			before, after := fmt.Sprintf("bench-undo-%d-before", round), fmt.Sprintf("bench-undo-%d-after", round)
			if err := f.twoCheckpoints(ctx, before, after); err != nil {
				return err
			}
			if err := f.appShows(ctx, after); err != nil {
				return err
			}
			start := time.Now()
			if err := f.undo(ctx, e.Paddock); err != nil {
				return err
			}
			err := f.appShows(ctx, before)
			rec.add("undo.cli", ms(time.Since(start)))
			return err
		},
		func() error {
			round++
			before, after := fmt.Sprintf("bench-undo-%d-before", round), fmt.Sprintf("bench-undo-%d-after", round)
			if err := f.twoCheckpoints(ctx, before, after); err != nil {
				return err
			}
			if _, err := f.ask(map[string]any{"op": "reload", "want": after}); err != nil {
				return err
			}
			start := time.Now()
			if err := f.undo(ctx, e.Paddock); err != nil {
				return err
			}
			_, err := f.ask(map[string]any{"op": "reload", "want": before})
			rec.add("undo.tab", ms(time.Since(start)))
			return err
		},
	)
	if err != nil {
		return nil, err
	}
	// The agent's memory with the desktop used and then left: the browser is gone.
	if err := f.stopNode(); err != nil {
		return nil, err
	}
	select {
	case <-time.After(o.Idle):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	sb, err := f.cp.Server.Fleet().Handle(ctx, fleet.Caller{Admin: true}, f.sandbox)
	if err != nil {
		return nil, err
	}
	mem, err := readIdleMemory(sb.Cgroup())
	if err != nil {
		return nil, err
	}
	rss := Summarize([]float64{mib(mem.AgentRSS)})
	idle, err := e.IdleSandboxes(ctx, 1, o.Idle)
	if err != nil {
		return nil, err
	}
	idleRSS := Summarize([]float64{mib(idle[0].AgentRSS)})
	stat, statBytes := rec.summary("static"), rec.summary("static.bytes")
	welcome, desk := rec.summary("welcome"), rec.summary("desktop")
	kp, kd, kw := rec.summary("key.proxy"), rec.summary("key.direct"), rec.summary("key.ws")
	ud, uc, ut := rec.summary("undo.desktop"), rec.summary("undo.cli"), rec.summary("undo.tab")
	assets := rec.summary("assets")
	return &Table{
		Title: "15. The desktop in Chromium",
		About: "A real control plane (server.New on loopback) with one user whose live sandbox runs a small static server of `/workspace` " +
			"(perl; `/` is index.html); Debian's Chromium headless, driven by playwright-core (`tests/browser/bench-desktop.mjs`), " +
			"talks to it while the harness measures the baselines itself, every variant in the same rounds. *Sign-in*: a fresh " +
			"browser context (no cookies, no cache) on `/login`, timed from the click on *Sign in*: to the desktop interactive (its " +
			"sandbox's role shown and the file tree listed), against the landing the control plane had before the desktop: the " +
			"app's page, handed off to the live apps host (the browser's requests to `/` and to the desktop's host are redirected " +
			"there). *Assets*: what the desktop's host sent for the page (HTML, JavaScript, CSS), compressed as sent, in kB. " +
			"*Keystroke*: on a desktop signed in once, with a terminal tab open on `bash`, a key pressed in xterm.js, timed in the " +
			"page from its keydown to the first output message on the tab's WebSocket (browser → control plane → agent → PTY and " +
			"back); without the proxy, the harness writes a key to the same PTY session through the agent's channel (WriteStdin) " +
			"and times it until the output reaches its own Attach of that session; the *breakdown* row sends the key through the control plane's " +
			"exec stream (`…/exec/stream`, attached to the same session) from the harness's own WebSocket client, the proxy without the browser. *Undo*: two checkpoints of index.html are " +
			"recorded through the API and the preview shows the second; the click on *Undo* in the timeline is timed until the " +
			"preview's frame shows the first; against `paddock undo <sandbox>` (the CLI's process) followed by GETs of the app " +
			"through the proxy every 20 ms until it serves the first (the issue's baseline: no browser); and, like for like, the same " +
			"`paddock undo` followed by reloads of the app's host (the preview's origin) in a Chromium tab of its own, opened and " +
			"signed in beside the desktop and showing the second, one reload after another until it shows the first. *Agent VmRSS*: the sandbox's agent after the browser has " +
			"gone and the sandbox has idled, one reading; its floor is the agent of a sandbox that never served the desktop, created through " +
			"the runner and idle as long, read in the same run. The *floor* of the assets is the same bundle (the desktop's files, inflated) " +
			"served by a plain Go file server (`http.FileServer` on loopback, no compression) to a fresh page in the same Chromium, " +
			"timed from navigation to its load event (information) with the bytes it sent counted the same way.",
		Rows: []Row{
			{Name: "sign-in → the desktop interactive", Unit: "ms", Summary: desk, Ratio: ratio(desk.P50, welcome.P50), Target: "≤ 2× sign-in → app's page", Met: yesNo(desk.P50 <= 2*welcome.P50)},
			{Name: "sign-in → the app's page (the landing before the desktop)", Unit: "ms", Summary: welcome, Ratio: "1.00× (baseline)"},
			assetsTarget.row(Row{Name: "the desktop's assets, compressed as sent", Unit: "kB", Summary: assets}, statBytes.P50, ""),
			{Name: "*floor:* the same bundle from a plain Go file server: bytes sent", Unit: "kB", Summary: statBytes, Ratio: "1.00× (floor)"},
			{Name: "*floor:* the same bundle from a plain Go file server: navigation → load", Unit: "ms", Summary: stat},
			{Name: "terminal keystroke → echo, through the control plane: the page's keydown → its WebSocket", Unit: "ms", Summary: kp, Ratio: ratio(kp.P50, kd.P50), Target: "≤ 2× without the proxy", Met: yesNo(kp.P50 <= 2*kd.P50)},
			{Name: "*breakdown:* the same through the control plane, the harness's WebSocket client", Unit: "ms", Summary: kw, Ratio: ratio(kw.P50, kd.P50)},
			{Name: "the same PTY through the agent's channel (no proxy)", Unit: "ms", Summary: kd, Ratio: "1.00× (baseline)"},
			{Name: "*Undo* clicked → the preview shows the restored page", Unit: "ms", Summary: ud, Ratio: ratio(ud.P50, uc.P50), Target: "≤ 1.3× CLI", Met: yesNo(ud.P50 <= 1.3*uc.P50)},
			{Name: "`paddock undo` → the app serves the restored page", Unit: "ms", Summary: uc, Ratio: "1.00× (baseline)"},
			{Name: "*like for like:* `paddock undo` → the app's own tab, reloaded, shows the restored page", Unit: "ms", Summary: ut, Ratio: ratio(ut.P50, uc.P50)},
			deskMemTarget.row(Row{Name: "agent VmRSS with the desktop served, idle", Unit: "MiB", Summary: rss}, idleRSS.P50, ""),
			{Name: "*floor:* agent VmRSS of a sandbox that never served the desktop, idle", Unit: "MiB", Summary: idleRSS, Ratio: "1.00× (floor)"},
		},
		Notes: []string{
			fmt.Sprintf("At the median the desktop is interactive %.0f ms after *Sign in* against %.0f ms to the app's page (%s); "+
				"a keystroke's echo takes %.1f ms in the page through the control plane, %.1f ms through it from the harness's WebSocket client, "+
				"against %.1f ms on the agent's channel; an undo shows in "+
				"the preview %.0f ms after the click against %.0f ms for the CLI and the app (%s), and against %.0f ms for the CLI and "+
				"a browser's tab of the app reloaded (%s, like for like).",
				desk.P50, welcome.P50, ratio(desk.P50, welcome.P50), kp.P50, kw.P50, kd.P50, ud.P50, uc.P50, ratio(ud.P50, uc.P50),
				ut.P50, ratio(ud.P50, ut.P50)),
			fmt.Sprintf("The desktop's host sends %.0f kB for the page where a plain file server sends %.0f kB of the same bundle (%s; target %s: %s): "+
				"the files are stored gzipped and sent as they are. The agent holds %.1f MiB with the desktop served against %.1f MiB in a sandbox "+
				"that never served it (%s; target %s: %s). Sizes are information, as the times are: the targets are ratios to floors of the same run.",
				assets.P50, statBytes.P50, ratio(assets.P50, statBytes.P50), assetsTarget, assetsTarget.word(assets.P50, statBytes.P50, ""),
				rss.P50, idleRSS.P50, ratio(rss.P50, idleRSS.P50), deskMemTarget, deskMemTarget.word(rss.P50, idleRSS.P50, "")),
		},
	}, nil
}

// Table 15's targets against its floors.
var (
	assetsTarget  = atMost(0.4, "a plain file server")
	deskMemTarget = atMost(1.2, "an idle sandbox's agent")
)

// startStaticDesktop serves the desktop's files, inflated, from a directory with a plain
// http.FileServer on loopback.
func (e *Env) startStaticDesktop() (*httptest.Server, error) {
	files, err := desktop.Files()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(e.Dir, "desktop-static-")
	if err != nil {
		return nil, err
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return nil, err
		}
	}
	return httptest.NewServer(http.FileServer(http.Dir(dir))), nil
}

// startDesktop starts the control plane with desktopApp, signs the user in, writes the
// first index.html, mints the CLI's token, starts the browser script and attaches to its
// terminal's session directly.
func (e *Env) startDesktop(ctx context.Context) (f *desktopFixture, err error) {
	f = &desktopFixture{direct: make(chan []byte, 1024), proxied: make(chan []byte, 1024)}
	started := f // a `return nil, err` below sets f to nil before this runs
	defer func() {
		if err != nil {
			err = errors.Join(err, started.Close())
			f = nil
		}
	}()
	app := server.AppConfig{Command: []string{"/usr/bin/perl", "-e", desktopApp}, Port: 8080, Build: "bench-static"}
	f.cp, err = e.startControlPlane(ctx, e.log, func(c *server.Config) { c.App = app }, func(ctx context.Context, cp *ControlPlane) error {
		var roles api.Roles
		if err := cp.JSON(ctx, "GET", "/api/v1/roles", nil, http.StatusOK, &roles); err != nil {
			return err
		}
		f.cp, f.sandbox = cp, roles.Live.ID
		if err := f.put(ctx, "index.html", "bench-welcome"); err != nil {
			return err
		}
		return f.appShows(ctx, "bench-welcome")
	})
	if err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	var tok api.Token
	if err := f.cp.JSON(ctx, "POST", "/api/v1/tokens", api.CreateTokenRequest{Name: "bench"}, http.StatusCreated, &tok); err != nil {
		return nil, err
	}
	f.token = tok.Secret
	if f.agent, err = f.cp.Server.Fleet().Agent(ctx, fleet.Caller{Admin: true}, f.sandbox); err != nil {
		return nil, err
	}
	if f.browserScript, err = startBrowserScript(ctx, "bench-desktop.mjs"); err != nil {
		return nil, err
	}
	u, err := url.Parse(f.cp.AppURL)
	if err != nil {
		return nil, fmt.Errorf("the apps host's URL: %w", err)
	}
	appHost := "http://" + net.JoinHostPort(origins.Host{Kind: origins.KindApp, ID: f.sandbox}.Label()+"."+origins.DefaultAppsDomain, u.Port())
	a, err := f.ask(map[string]any{"op": "init", "base": f.cp.URL, "app": strings.TrimSuffix(f.cp.AppURL, "/"), "appHost": appHost, "user": benchUser, "pass": benchPassword,
		"sandbox": f.sandbox, "marker": "index.html", "welcome": "bench-"})
	if err != nil {
		return nil, err
	}
	f.session = a.Session
	events, err := f.agent.Attach(ctx, a.Session, 0)
	if err != nil {
		return nil, fmt.Errorf("attach to the terminal's session %s: %w", a.Session, err)
	}
	go func() {
		for {
			ev, err := events.Recv()
			if err != nil {
				close(f.direct)
				return
			}
			if out := ev.GetOutput(); out != nil {
				f.direct <- out.Data
			}
		}
	}()
	wsURL := "ws" + strings.TrimPrefix(f.cp.URL, "http") + "/api/v1/sandboxes/" + f.sandbox + "/exec/stream"
	if f.ws, _, err = websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: f.cp.Client, Subprotocols: []string{api.StreamProtocol}}); err != nil {
		return nil, fmt.Errorf("exec stream: %w", err)
	}
	f.ws.SetReadLimit(1 << 22)
	start, _ := json.Marshal(api.StreamStart{Attach: a.Session})
	if err := f.ws.Write(ctx, websocket.MessageText, start); err != nil {
		return nil, fmt.Errorf("exec stream: %w", err)
	}
	go func() {
		defer close(f.proxied)
		for {
			typ, data, err := f.ws.Read(ctx)
			if err != nil {
				return
			}
			if typ == websocket.MessageBinary && len(data) > 0 {
				f.proxied <- data[1:]
			}
		}
	}()
	return f, nil
}

// answer is the browser script's answer to one request.
type answer struct {
	MS      float64 `json:"ms"`
	Bytes   int64   `json:"bytes"`
	Session string  `json:"session"`
	PutMS   float64 `json:"put_ms"`
	At      int64   `json:"at"`
	// T0 is when the script started the edit, in ms since the epoch (sub-ms).
	T0    float64 `json:"t0"`
	Error string  `json:"error"`
}

// directKey writes key to the terminal's PTY through the agent and waits until its echo
// comes back on the harness's own attach (the echo of DEL is a backspace).
func (f *desktopFixture) directKey(ctx context.Context, key byte) (time.Duration, error) {
	return f.timeKey(f.direct, key, func() error { return f.agent.WriteStdin(ctx, f.session, []byte{key}, false) })
}

// proxiedKey is directKey through the control plane's exec stream.
func (f *desktopFixture) proxiedKey(ctx context.Context, key byte) (time.Duration, error) {
	return f.timeKey(f.proxied, key, func() error { return f.ws.Write(ctx, websocket.MessageBinary, []byte{key}) })
}

func (f *desktopFixture) timeKey(out chan []byte, key byte, send func() error) (time.Duration, error) {
	for drained := false; !drained; {
		select {
		case <-out:
		default:
			drained = true
		}
	}
	want := key
	if key == 0x7f {
		want = '\b'
	}
	start := time.Now()
	if err := send(); err != nil {
		return 0, err
	}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case b, ok := <-out:
			if !ok {
				return 0, errors.New("the terminal's session ended")
			}
			if bytes.IndexByte(b, want) >= 0 {
				return time.Since(start), nil
			}
		case <-timeout:
			return 0, fmt.Errorf("no echo of %q within 30 s", key)
		}
	}
}

// put writes a workspace file through the API.
func (f *desktopFixture) put(ctx context.Context, path, content string) error {
	req, err := http.NewRequestWithContext(ctx, "PUT", f.cp.URL+"/api/v1/sandboxes/"+f.sandbox+"/files/content?path="+path, strings.NewReader(content))
	if err != nil {
		return err
	}
	req.Header.Set("X-CSRF-Token", f.cp.CSRF)
	resp, err := f.cp.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("PUT %s: %s: %s", path, resp.Status, bytes.TrimSpace(b))
	}
	return nil
}

// twoCheckpoints records index.html holding before, then after.
func (f *desktopFixture) twoCheckpoints(ctx context.Context, before, after string) error {
	for _, s := range []string{before, after} {
		if err := f.put(ctx, "index.html", s); err != nil {
			return err
		}
		// 201 a new checkpoint; 200 when the history's watcher had recorded it already.
		if err := f.cp.JSON(ctx, "POST", "/api/v1/sandboxes/"+f.sandbox+"/history/checkpoints", map[string]string{"message": s}, http.StatusCreated, nil); err != nil && !strings.Contains(err.Error(), "200 OK") {
			return err
		}
	}
	return nil
}

// undo runs `paddock undo` on the fixture's sandbox, as the CLI's own process.
func (f *desktopFixture) undo(ctx context.Context, paddock string) error {
	cmd := command(ctx, paddock, "undo", f.sandbox)
	cmd.Env = append(os.Environ(), "PADDOCK_SERVER="+f.cp.URL, "PADDOCK_TOKEN="+f.token)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("paddock undo: %w: %s", err, tail(string(out)))
	}
	return nil
}

// appShows GETs the live app through the proxy every 20 ms until it serves want.
func (f *desktopFixture) appShows(ctx context.Context, want string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		req, err := http.NewRequestWithContext(ctx, "GET", f.cp.AppURL+"/", nil)
		if err != nil {
			return err
		}
		if resp, err := f.cp.Client.Do(req); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && string(b) == want {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the app did not serve %q within a minute", want)
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (f *desktopFixture) stopNode() error {
	err := f.browserScript.stop()
	f.browserScript = nil
	return err
}

// Close stops the browser and the control plane.
func (f *desktopFixture) Close() error {
	err := f.stopNode()
	if f.ws != nil {
		f.ws.Close(websocket.StatusNormalClosure, "")
	}
	if f.cp != nil {
		f.cp.Close()
	}
	return err
}
