package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/egress"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/provider"
	"github.com/paddockhq/paddock/internal/provider/npmregistry"
	"github.com/paddockhq/paddock/internal/sandbox/agentclient"
	"github.com/paddockhq/paddock/internal/server"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// npmHost is the name sandboxes reach the loopback npm registry by: the egress policy
// allows it and the proxy resolves it to loopback.
const npmHost = "registry.npm.test"

// loopback resolves every name to 127.0.0.1 (the registry's only address).
type loopback struct{}

func (loopback) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

// Accent colours of the Vite template's h1 (its theme's --accent), as CSS computes them.
var accents = [2]struct{ hex, rgb string }{{"#dc2626", "rgb(220, 38, 38)"}, {"#2563eb", "rgb(37, 99, 235)"}}

// providersFixture is the providers table's control plane with its npm registry, the
// host's copies of the same projects, and the browser script.
type providersFixture struct {
	cp        *ControlPlane
	dir       string // the host's projects and caches
	regURL    string // the registry as the host reaches it
	reg       *http.Server
	live, dev string
	token     string
	agent     *agentclient.Client
	hostVite  *exec.Cmd
	vitePort  int
	// files writes the host's hmr-site files over HTTP: the floor of an edit made from
	// another process over the network.
	files    *http.Server
	filesURL string
	// renames sees the dev sandbox's theme renamed into place in its workspace.
	renames *renameWatch
	*browserScript
	round int
}

// hmrEdits is how many edits of each kind a round of the providers table makes: a page
// shows a change at its next frame, 16.7 ms apart, so that one edit more or less in a
// frame moves a median of few; more edits steady it.
const hmrEdits = 3

// ProvidersTable times the node provider's steps through the API against the same
// commands run on the host, interleaved: scaffold, install and first page of the Vite
// app; an edit's HMR in Chromium; a build with warm caches.
func (e *Env) ProvidersTable(ctx context.Context, o Options) (t *Table, err error) {
	f, err := e.startProviders(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	n := max(o.ProviderRounds, 1)
	warmup := min(o.Warmup, 1)
	if o.ProviderRounds == 0 {
		warmup = 0
	}
	rec := newRecorder()
	hmr := [2]int{}
	// Each edit starts once Vite's watcher has settled from the last: it can miss a second
	// atomic replacement of a file that comes within about 100 ms of the first (see
	// docs/providers.md, Not yet done).
	settle := func() { time.Sleep(250 * time.Millisecond) }
	err = interleave(rec, warmup, n,
		func() error {
			d, err := f.sandboxScaffold(ctx)
			rec.add("new.sandbox", ms(d))
			return err
		},
		func() error {
			d, err := f.hostScaffold(ctx)
			rec.add("new.host", ms(d))
			return err
		},
		func() error {
			edits := []func() error{
				func() error {
					f.renames.reset()
					a, err := f.edit("proxy", &hmr[0])
					if err != nil {
						return err
					}
					at, err := f.renames.next()
					rec.add("hmr.proxy", a.MS)
					rec.add("hmr.put", a.PutMS)
					rec.add("hmr.proxy.in", float64(at.UnixMicro())/1000-a.T0)
					return err
				},
				func() error {
					d, in, err := f.agentEdit(ctx, &hmr[0])
					rec.add("hmr.agent", ms(d))
					rec.add("hmr.agent.in", ms(in))
					return err
				},
				func() error {
					a, err := f.edit("direct", &hmr[1])
					rec.add("hmr.direct", a.MS)
					return err
				},
				func() error {
					a, err := f.edit("http", &hmr[1])
					rec.add("hmr.http", a.MS)
					return err
				},
			}
			// Each kind hmrEdits times, in turn, the order rotated at each pass.
			for i := range hmrEdits * len(edits) {
				settle()
				if err := edits[(i+i/len(edits))%len(edits)](); err != nil {
					return err
				}
			}
			return nil
		},
		func() error {
			start := time.Now()
			err := f.step(ctx, f.dev, "build", api.ProviderRequest{Dir: "build-site"})
			rec.add("build.sandbox", ms(time.Since(start)))
			return err
		},
		func() error {
			start := time.Now()
			err := f.hostBuild(ctx, filepath.Join(f.dir, "build-site"), filepath.Join(f.dir, "cache"))
			rec.add("build.host", ms(time.Since(start)))
			return err
		},
	)
	if err != nil {
		return nil, err
	}
	ns, nh := rec.summary("new.sandbox"), rec.summary("new.host")
	hp, hd, put, ha, hh := rec.summary("hmr.proxy"), rec.summary("hmr.direct"), rec.summary("hmr.put"), rec.summary("hmr.agent"), rec.summary("hmr.http")
	pin, ain := rec.summary("hmr.proxy.in"), rec.summary("hmr.agent.in")
	bs, bh := rec.summary("build.sandbox"), rec.summary("build.host")
	return &Table{
		Title: "20. Runtime providers: the Vite app's scaffold, HMR and rebuild against the same on the host",
		About: "A real control plane (server.New on loopback) whose network policy allows only a loopback npm registry " +
			"(`internal/provider/npmregistry`, the template's packages) through the egress proxy; the host's peer uses the same " +
			"registry directly, every variant in the same rounds. *Scaffold*: in the user's live sandbox, with its npm cache " +
			"removed first, `POST …/app/new` (the node provider's Vite + React template, then `npm ci`) and `POST …/app/preview` " +
			"(Vite's dev server as the sandbox's app) over SSE, then GETs through the proxy until the page is Vite's; against the " +
			"template's files written on the host, `npm ci` with an empty cache, `npm run dev` started and GETs of it until it " +
			"serves the page. *HMR*: Debian's Chromium headless (`tests/browser/bench-vibe.mjs`) holds two pages of the app, one " +
			"from the dev sandbox through the proxy, one from Vite run on the host; the theme (a CSS variable) is written " +
			"(through the file API for the sandbox; to the file for the host, into place by a rename as the file API writes it, since a write in place can be read by Vite's watcher half done) and timed until the page's h1 has the new " +
			"computed colour, polled each frame from before the write, the page timed brought to the front (a page behind another gets about one frame a second) " +
			"and each edit a quarter of a second after the last, once Vite's watcher has settled, each round " + fmt.Sprint(hmrEdits) + " edits of each kind in turn (the first *breakdown* row is the sandbox's edit until the file API answered it, " +
			"which it does after the edit's checkpoint, so after the page may have changed; the *floor* row makes the host's edit as the sandbox's is made, from another process over HTTP: " +
			"a fetch PUT to a bare Go handler in the harness that writes the file; the second writes the same file from the harness through the agent's file channel, as the file API does but without the control plane, and times it to the page's colour, in the page's wall clock against the harness's). " +
			"*Rebuild*: `POST …/app/build` (the provider's install, then `npm run build`) of a project built " +
			"once already, its npm cache warm, against the same commands on the host with its warm cache; on both sides the install finds `node_modules` up to date with the lockfile and skips `npm ci`.",
		Rows: []Row{
			{Name: "scaffold + install + first preview page, through the API's provider steps", Unit: "ms", Summary: ns, Ratio: ratio(ns.P50, nh.P50), Target: "≤ 1.5× the host", Met: yesNo(ns.P50 <= 1.5*nh.P50)},
			{Name: "the same steps on the host, the same registry", Unit: "ms", Summary: nh, Ratio: "1.00× (baseline)"},
			{Name: "HMR: an edit → the changed style in Chromium, through the proxy", Unit: "ms", Summary: hp, Ratio: ratio(hp.P50, hd.P50), Target: "≤ 1.3× Vite direct", Met: yesNo(hp.P50 <= 1.3*hd.P50)},
			{Name: "the same, against the floor row's edit (the same HTTP request from the script, to a bare handler)", Unit: "ms", Summary: hp, Ratio: ratio(hp.P50, hh.P50), Target: "≤ 1.3× the floor", Met: yesNo(hp.P50 <= 1.3*hh.P50)},
			{Name: "*breakdown:* of which the file API's PUT of the theme, until its answer", Unit: "ms", Summary: put, Ratio: ratio(put.P50, hd.P50)},
			{Name: "*breakdown:* of which the PUT's way in: until the file is renamed into place in the sandbox's workspace", Unit: "ms", Summary: pin, Ratio: ratio(pin.P50, hd.P50)},
			{Name: "*breakdown:* the same edit written through the agent's own file channel (no control plane), through the proxy", Unit: "ms", Summary: ha, Ratio: ratio(ha.P50, hd.P50)},
			{Name: "*breakdown:* of which its way in, until the rename", Unit: "ms", Summary: ain, Ratio: ratio(ain.P50, hd.P50)},
			{Name: "the same edit, Vite on the host reached directly", Unit: "ms", Summary: hd, Ratio: "1.00× (baseline)"},
			{Name: "*floor:* the same edit as an HTTP PUT to a bare handler that writes the file on the host, Vite on the host", Unit: "ms", Summary: hh, Ratio: vsPeer(hh.P50, hd.P50, "Vite direct", hp.P50)},
			{Name: "rebuild with warm caches (install, `npm run build`), the provider's build step", Unit: "ms", Summary: bs, Ratio: ratio(bs.P50, bh.P50), Target: "≤ 1.2× the host", Met: yesNo(bs.P50 <= 1.2*bh.P50)},
			{Name: "the same commands on the host, warm cache", Unit: "ms", Summary: bh, Ratio: "1.00× (baseline)"},
		},
		Notes: []string{
			fmt.Sprintf("At the median a new Vite app is installed and previewed in %.1f s through paddock against %.1f s on the host (%s); "+
				"an edit shows by HMR in %.0f ms through the proxy against %.0f ms direct (%s); a rebuild takes %.1f s against %.1f s (%s).",
				ns.P50/1000, nh.P50/1000, ratio(ns.P50, nh.P50), hp.P50, hd.P50, ratio(hp.P50, hd.P50), bs.P50/1000, bh.P50/1000, ratio(bs.P50, bh.P50)),
		},
	}, nil
}

// startProviders starts the registry and the control plane, scaffolds the HMR and build
// projects in the dev sandbox and on the host, starts both dev servers and the browser.
func (e *Env) startProviders(ctx context.Context) (f *providersFixture, err error) {
	f = &providersFixture{}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.Close())
			f = nil
		}
	}()
	mirror, err := npmMirror()
	if err != nil {
		return nil, err
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := npmregistry.Fill(fctx, mirror, provider.NodeTemplateLock); err != nil {
		return nil, fmt.Errorf("filling the npm mirror %s from %s (needed once): %w", mirror, npmregistry.Upstream, err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f.reg = &http.Server{Handler: npmregistry.Handler(mirror), ReadHeaderTimeout: 10 * time.Second}
	go f.reg.Serve(lis)
	port := lis.Addr().(*net.TCPAddr).Port
	f.regURL = fmt.Sprintf("http://127.0.0.1:%d/", port)
	if f.dir, err = os.MkdirTemp(e.Dir, "providers-"); err != nil {
		return nil, err
	}
	pol := filepath.Join(f.dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte("network:\n  default: deny\n  allow: [\""+npmHost+"\"]\n"), 0o600); err != nil {
		return nil, err
	}
	opts := server.Options{Egress: egress.Options{Resolver: loopback{}, HTTPPorts: []uint16{uint16(port)},
		UnsafeAllowAddrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, DialTimeout: 5 * time.Second}}
	f.cp, err = e.startControlPlaneWith(ctx, e.log, func(c *server.Config) { c.NetworkPolicy = pol }, opts, nil)
	if err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	var roles api.Roles
	if err := f.cp.JSON(ctx, "GET", "/api/v1/roles", nil, http.StatusOK, &roles); err != nil {
		return nil, err
	}
	f.live, f.dev = roles.Live.ID, roles.Dev.ID
	var tok api.Token
	if err := f.cp.JSON(ctx, "POST", "/api/v1/tokens", api.CreateTokenRequest{Name: "bench"}, http.StatusCreated, &tok); err != nil {
		return nil, err
	}
	f.token = tok.Secret
	// The dev sandbox: the HMR project previewed, the build project built once.
	for _, d := range []string{"hmr-site", "build-site"} {
		if err := f.sandboxNew(ctx, f.dev, d); err != nil {
			return nil, err
		}
	}
	if err := f.step(ctx, f.dev, "build", api.ProviderRequest{Dir: "build-site"}); err != nil {
		return nil, err
	}
	if err := f.step(ctx, f.dev, "preview", api.ProviderRequest{Dir: "hmr-site"}); err != nil {
		return nil, err
	}
	src, err := findFile(f.cp.Workspaces, "hmr-site/src/theme.css")
	if err != nil {
		return nil, err
	}
	if f.renames, err = watchRenames(src, "theme.css"); err != nil {
		return nil, err
	}
	// The host: the same two projects, one cache kept warm.
	cache := filepath.Join(f.dir, "cache")
	for _, d := range []string{"hmr-site", "build-site"} {
		if err := f.hostNew(ctx, filepath.Join(f.dir, d), cache); err != nil {
			return nil, err
		}
	}
	if err := f.hostBuild(ctx, filepath.Join(f.dir, "build-site"), cache); err != nil {
		return nil, err
	}
	if f.vitePort, err = freePort(); err != nil {
		return nil, err
	}
	if f.hostVite, err = f.hostDev(ctx, filepath.Join(f.dir, "hmr-site"), cache, f.vitePort); err != nil {
		return nil, err
	}
	if err := hostServes(ctx, f.vitePort); err != nil {
		return nil, err
	}
	if err := f.serveFiles(filepath.Join(f.dir, "hmr-site")); err != nil {
		return nil, err
	}
	if f.browserScript, err = startBrowserScript(ctx, "bench-vibe.mjs"); err != nil {
		return nil, err
	}
	if _, err := f.ask(map[string]any{"op": "init", "base": f.cp.URL, "user": benchUser, "pass": benchPassword,
		"direct": fmt.Sprintf("http://127.0.0.1:%d/", f.vitePort)}); err != nil {
		return nil, err
	}
	return f, nil
}

// serveFiles serves PUT /?path=P on loopback, writing the body to dir/P: an edit made over
// HTTP with nothing else on its path. The file is put into place by a rename, as
// paddock's file API does: written in place, it can be read by Vite's watcher half done.
func (f *providersFixture) serveFiles(dir string) error {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	f.filesURL = "http://" + lis.Addr().String() + "/"
	f.files = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Query().Get("path")
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if r.Method != http.MethodPut || !filepath.IsLocal(p) || err != nil {
			http.Error(w, "want PUT /?path=a local path, at most 1 MiB", http.StatusBadRequest)
			return
		}
		if err := replaceFile(filepath.Join(dir, p), b); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	go f.files.Serve(lis)
	return nil
}

// replaceFile writes data to a new file beside path and renames it over path.
func replaceFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	err = errors.Join(err, f.Chmod(0o644), f.Close())
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

// npmMirror is the directory the tests fill with the template's packages and keep.
func npmMirror() (string, error) {
	if d := os.Getenv("PADDOCK_NPM_MIRROR"); d != "" {
		return d, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "paddock-test", "npm"), nil
}

// step runs a provider step over the API's event stream and fails when its result does.
func (f *providersFixture) step(ctx context.Context, sb, step string, req api.ProviderRequest) error {
	b, _ := json.Marshal(req)
	hr, err := http.NewRequestWithContext(ctx, "POST", f.cp.URL+"/api/v1/sandboxes/"+sb+"/app/"+step, strings.NewReader(string(b)))
	if err != nil {
		return err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("X-CSRF-Token", f.cp.CSRF)
	// Not the load client: a step lasts longer than its timeout allows.
	client := &http.Client{Jar: f.cp.Client.Jar, Transport: f.cp.Client.Transport, Timeout: 15 * time.Minute}
	resp, err := client.Do(hr)
	if err != nil {
		return fmt.Errorf("%s %s: %w", step, req.Dir, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s %s: %s: %s", step, req.Dir, resp.Status, body)
	}
	var last api.ProviderEvent
	var log strings.Builder
	if err := paddock.ReadProviderEvents(resp.Body, func(ev api.ProviderEvent) {
		last = ev
		if ev.Type == api.EventLog {
			fmt.Fprintf(&log, "%s: %s\n", ev.Command, ev.Line)
		}
	}); err != nil {
		return fmt.Errorf("%s %s: %w", step, req.Dir, err)
	}
	if last.Type != api.EventResult || last.Error != "" {
		return fmt.Errorf("%s %s: %s; log:\n%s", step, req.Dir, last.Error, tail(log.String()))
	}
	return nil
}

// sandboxNew writes the project's .npmrc (naming the registry, as a user's would name their
// mirror) and scaffolds the Vite template into dir.
func (f *providersFixture) sandboxNew(ctx context.Context, sb, dir string) error {
	if err := f.put(ctx, sb, dir+"/.npmrc", fmt.Sprintf("registry=http://%s:%s/\n", npmHost, f.regPort())); err != nil {
		return err
	}
	return f.step(ctx, sb, "new", api.ProviderRequest{Runtime: "node", Name: "bench-site", Dir: dir})
}

func (f *providersFixture) regPort() string {
	_, p, _ := net.SplitHostPort(strings.TrimSuffix(strings.TrimPrefix(f.regURL, "http://"), "/"))
	return p
}

// sandboxScaffold is one timed scaffold, install and first page in the live sandbox, the
// previous round's project and the user's npm cache removed first.
func (f *providersFixture) sandboxScaffold(ctx context.Context) (time.Duration, error) {
	f.round++
	dir := fmt.Sprintf("site-%d", f.round)
	var res api.ExecResult
	if err := f.cp.JSON(ctx, "POST", "/api/v1/sandboxes/"+f.live+"/exec", api.ExecRequest{Argv: []string{"sh", "-c",
		`rm -rf site-* "${npm_config_cache:-$HOME/.npm}"`}, TimeoutMS: 120000}, http.StatusOK, &res); err != nil {
		return 0, err
	}
	if res.ExitCode != 0 {
		return 0, fmt.Errorf("removing the last project and the npm cache: %s", res.Stderr)
	}
	if err := f.put(ctx, f.live, dir+"/.npmrc", fmt.Sprintf("registry=http://%s:%s/\n", npmHost, f.regPort())); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := f.step(ctx, f.live, "new", api.ProviderRequest{Runtime: "node", Name: "bench-site", Dir: dir}); err != nil {
		return 0, err
	}
	if err := f.step(ctx, f.live, "preview", api.ProviderRequest{Dir: dir}); err != nil {
		return 0, err
	}
	err := servesVite(ctx, f.cp.Client, f.cp.AppURL+"/")
	return time.Since(start), err
}

// hostScaffold is the same on the host: the template's files, npm ci with an empty cache,
// the dev server started and fetched until it serves the page.
func (f *providersFixture) hostScaffold(ctx context.Context) (time.Duration, error) {
	dir := filepath.Join(f.dir, fmt.Sprintf("site-%d", f.round))
	cache := filepath.Join(f.dir, fmt.Sprintf("cold-%d", f.round))
	_ = os.RemoveAll(dir)
	_ = os.RemoveAll(cache)
	port, err := freePort()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := f.hostNew(ctx, dir, cache); err != nil {
		return 0, err
	}
	vite, err := f.hostDev(ctx, dir, cache, port)
	if err != nil {
		return 0, err
	}
	err = hostServes(ctx, port)
	d := time.Since(start)
	stopGroup(vite)
	_ = os.RemoveAll(dir)
	_ = os.RemoveAll(cache)
	return d, err
}

// hostNew writes the template into dir and installs it as the provider's resolve does.
func (f *providersFixture) hostNew(ctx context.Context, dir, cache string) error {
	files, err := provider.Node{}.Scaffold("bench-site")
	if err != nil {
		return err
	}
	files[".npmrc"] = []byte("registry=" + f.regURL + "\n")
	for name, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
	}
	return runHost(ctx, dir, cache, provider.Node{}.Resolve(provider.Project{Runtime: "node", Dir: "."}))
}

// hostBuild runs the provider's install and build commands on the host.
func (f *providersFixture) hostBuild(ctx context.Context, dir, cache string) error {
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		return err
	}
	scripts, err := provider.ParsePackageJSON(b)
	if err != nil {
		return err
	}
	p := provider.Project{Runtime: "node", Dir: ".", Scripts: scripts}
	return runHost(ctx, dir, cache, append(provider.Node{}.Resolve(p), provider.Node{}.Build(p)...))
}

func hostEnv(cache string) []string {
	return append(os.Environ(), "npm_config_cache="+cache, "npm_config_update_notifier=false")
}

func runHost(ctx context.Context, dir, cache string, cmds []provider.Command) error {
	for _, c := range cmds {
		cmd := exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...)
		cmd.Dir, cmd.Env = dir, append(hostEnv(cache), c.Env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s on the host: %w: %s", c.Name, err, tail(string(out)))
		}
	}
	return nil
}

// hostDev starts the provider's dev server command in dir on the host, on loopback.
func (f *providersFixture) hostDev(ctx context.Context, dir, cache string, port int) (*exec.Cmd, error) {
	pv := provider.Node{}.Preview(provider.Project{Runtime: "node", Dir: ".", Scripts: map[string]string{"dev": "vite"}}, port)
	argv := append([]string(nil), pv.Command...)
	for i, a := range argv {
		if a == "0.0.0.0" {
			argv[i] = "127.0.0.1"
		}
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = dir, append(hostEnv(cache), pv.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("the host's dev server: %w", err)
	}
	return cmd, nil
}

// stopGroup kills a dev server's process group (npm, its shell, Vite) and reaps it.
func stopGroup(cmd *exec.Cmd) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Wait()
}

func hostServes(ctx context.Context, port int) error {
	return servesVite(ctx, &http.Client{Timeout: 10 * time.Second}, "http://127.0.0.1:"+strconv.Itoa(port)+"/")
}

// servesVite GETs url every 20 ms until it answers Vite's page of the template.
func servesVite(ctx context.Context, c *http.Client, url string) error {
	deadline := time.Now().Add(5 * time.Minute)
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Accept", "text/html")
		if resp, err := c.Do(req); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(b), "/@vite/client") && strings.Contains(string(b), "bench-site") {
				return nil
			}
			last = fmt.Sprintf("%s %.200q", resp.Status, b)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not serve the Vite app within 5 minutes (last: %s)", url, last)
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// edit changes the theme of one page's project to the next accent and times it to the
// page's computed style.
func (f *providersFixture) edit(via string, next *int) (answer, error) {
	files, err := provider.Node{}.Scaffold("bench-site")
	if err != nil {
		return answer{}, err
	}
	a := accents[*next%2]
	*next++
	theme := strings.Replace(string(files["src/theme.css"]), "--accent: #2563eb", "--accent: "+a.hex, 1)
	return f.ask(map[string]any{"op": "hmr", "via": via, "theme": theme, "color": a.rgb, "base": f.cp.URL,
		"token": f.token, "sandbox": f.dev, "path": "hmr-site/src/theme.css", "file": filepath.Join(f.dir, "hmr-site", "src", "theme.css"),
		"put_url": f.filesURL + "?path=src/theme.css"})
}

// agentEdit writes the next theme of the dev sandbox's project through its agent's file
// channel (not the control plane), and times it until the proxied page shows it, and until
// the file was in place.
func (f *providersFixture) agentEdit(ctx context.Context, next *int) (shown, in time.Duration, err error) {
	files, err := provider.Node{}.Scaffold("bench-site")
	if err != nil {
		return 0, 0, err
	}
	a := accents[*next%2]
	*next++
	theme := strings.Replace(string(files["src/theme.css"]), "--accent: #2563eb", "--accent: "+a.hex, 1)
	if f.agent == nil {
		if f.agent, err = f.cp.Server.Fleet().Agent(ctx, fleet.Caller{Admin: true}, f.dev); err != nil {
			return 0, 0, err
		}
	}
	if _, err := f.ask(map[string]any{"op": "watch", "color": a.rgb}); err != nil {
		return 0, 0, err
	}
	f.renames.reset()
	start := time.Now()
	up, err := f.agent.Write(ctx)
	if err != nil {
		return 0, 0, err
	}
	if err := up.Send(&pb.WriteRequest{Path: "hmr-site/src/theme.css", Mode: 0o644, Data: []byte(theme)}); err != nil {
		return 0, 0, err
	}
	if _, err := up.CloseAndRecv(); err != nil {
		return 0, 0, fmt.Errorf("writing the theme through the agent: %w", err)
	}
	at, err := f.renames.next()
	if err != nil {
		return 0, 0, err
	}
	seen, err := f.ask(map[string]any{"op": "seen"})
	return time.UnixMilli(seen.At).Sub(start), at.Sub(start), err
}

// put writes a workspace file through the API.
func (f *providersFixture) put(ctx context.Context, sb, path, content string) error {
	req, err := http.NewRequestWithContext(ctx, "PUT", f.cp.URL+"/api/v1/sandboxes/"+sb+"/files/content?path="+path, strings.NewReader(content))
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
		return fmt.Errorf("PUT %s: %s: %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	return nil
}

// Close stops the browser, the host's dev server, the control plane and the registry.
func (f *providersFixture) Close() error {
	err := f.browserScript.stop()
	f.renames.Close()
	stopGroup(f.hostVite)
	if f.cp != nil {
		f.cp.Close()
	}
	if f.reg != nil {
		f.reg.Close()
	}
	if f.files != nil {
		f.files.Close()
	}
	return err
}
