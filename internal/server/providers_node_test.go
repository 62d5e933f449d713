package server_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/browsertest"
	"github.com/paddockhq/paddock/internal/egress"
	"github.com/paddockhq/paddock/internal/origins"
	"github.com/paddockhq/paddock/internal/provider"
	"github.com/paddockhq/paddock/internal/provider/npmregistry"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/testenv"
)

// registryHost is the name the sandbox's npm uses for the test's registry; the egress
// proxy allows it and resolves it to loopback.
const registryHost = "registry.npm.test"

// npmMirror is the directory of the Vite template's packages, filled once from the public
// registry and kept between runs (PADDOCK_NPM_MIRROR, or under the user's cache).
func npmMirror(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("PADDOCK_NPM_MIRROR")
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(cache, "paddock-test", "npm")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	if err := npmregistry.Fill(ctx, dir, provider.NodeTemplateLock); err != nil {
		t.Fatalf("filling the npm mirror %s from %s (needed once): %v", dir, npmregistry.Upstream, err)
	}
	return dir
}

// startWithRegistry starts a server whose network policy allows only the loopback npm
// registry it starts, and returns the environment a sandbox's npm needs to use it.
func startWithRegistry(t *testing.T) (*servertest.Env, []string) {
	t.Helper()
	e, env, _ := startWithRegistryLog(t)
	return e, env
}

// startWithRegistryLog is startWithRegistry, with the log of the requests the registry
// serves.
func startWithRegistryLog(t *testing.T) (*servertest.Env, []string, *requestLog) {
	t.Helper()
	return startWithRegistryConfig(t, nil)
}

// startWithRegistryConfig is startWithRegistryLog, with the server's configuration
// changed by change (given the registry's environment) before it starts.
func startWithRegistryConfig(t *testing.T, change func(c *server.Config, env []string)) (*servertest.Env, []string, *requestLog) {
	t.Helper()
	testenv.RequireRoot(t)
	log := &requestLog{}
	reg := httptest.NewServer(log.wrap(npmregistry.Handler(npmMirror(t))))
	t.Cleanup(reg.Close)
	_, portText, _ := net.SplitHostPort(reg.Listener.Addr().String())
	var port uint16
	fmt.Sscan(portText, &port)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte("network:\n  default: deny\n  allow: [\""+registryHost+"\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{fmt.Sprintf("npm_config_registry=http://%s:%d/", registryHost, port)}
	cfg := server.Config{Runner: testenv.Config(t), Listen: "127.0.0.1:0", NetworkPolicy: pol}
	if change != nil {
		change(&cfg, env)
	}
	e := servertest.StartOpts(t, cfg, server.Options{
		AuthOptions: servertest.CheapAuth(),
		Egress: egress.Options{Resolver: loopbackResolver{}, HTTPPorts: []uint16{port},
			UnsafeAllowAddrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, DialTimeout: 5 * time.Second},
	})
	return e, env, log
}

// The Vite + React template is scaffolded and installed from the registry through the
// egress allowlist, builds, and its preview is Vite's dev server, served through the proxy
// with its HMR client.
func TestProviderNodeVite(t *testing.T) {
	e, env := startWithRegistry(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "p", Env: env,
		Limits: api.Limits{Memory: "1GiB"}}), http.StatusCreated, &sb)

	evs := providerStep(t, alice, sb.ID, "new", api.ProviderRequest{Runtime: "node", Name: "my-site", Dir: "my-site"})
	if r := result(evs); r.Error != "" || !slices.Contains(ran(evs), "resolve: npm install") {
		t.Fatalf("new node: ran %q, result %+v; log:\n%s", ran(evs), r, logText(evs))
	}
	site := api.ProviderRequest{Dir: "my-site"}
	evs = providerStep(t, alice, sb.ID, "package", site)
	if r := result(evs); r.Error != "" || r.Artifact != "my-site/.paddock/package/node.tar.gz" {
		t.Fatalf("package: %+v; log:\n%s", r, logText(evs))
	}
	// What new installed is not installed again.
	const skipped = "node_modules is up to date with package-lock.json: npm ci skipped"
	if !logged(evs, skipped) {
		t.Errorf("package right after new installed the dependencies again; log:\n%s", logText(evs))
	}
	// The stored artifact names the toolchain and lists the lockfile's packages.
	var art api.Artifact
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/artifacts/"+result(evs).ArtifactID, nil), http.StatusOK, &art)
	if m := art.Manifest; m == nil || !strings.HasPrefix(m.Toolchain["node"], "v") || m.Toolchain["npm"] == "" || m.Lockfile != "package-lock.json" || !slices.ContainsFunc(m.Files, func(f api.ArtifactFile) bool { return f.Path == "index.html" }) {
		t.Errorf("the node artifact's manifest: %+v", art.Manifest)
	}
	sresp := alice.DoToken("GET", "/api/v1/artifacts/"+result(evs).ArtifactID+"/sbom", nil)
	sbom, _ := io.ReadAll(sresp.Body)
	sresp.Body.Close()
	if !strings.Contains(string(sbom), `"purl": "pkg:npm/react@`) || !strings.Contains(string(sbom), `"purl": "pkg:npm/vite@`) {
		t.Errorf("the node SBOM does not list react and vite:\n%.2000s", sbom)
	}
	// A changed package.json is installed anew.
	execOK(t, alice, sb.ID, "touch", "my-site/package.json")
	evs = providerStep(t, alice, sb.ID, "preview", site)
	if r := result(evs); r.Error != "" || r.Preview == nil || !r.Preview.HotReload {
		t.Fatalf("preview: %+v", r)
	}
	if logged(evs, skipped) {
		t.Errorf("preview after package.json changed did not install; log:\n%s", logText(evs))
	}
	resp := alice.AppToken(e.AppsURL(origins.Host{Kind: origins.KindApp, ID: sb.ID}), "GET", "/", nil)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "/@vite/client") || !strings.Contains(string(page), "<title>my-site</title>") {
		t.Errorf("the preview serves %d %q, want Vite's page of my-site", resp.StatusCode, page)
	}
}

func logText(evs []api.ProviderEvent) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Type == api.EventLog {
			fmt.Fprintf(&b, "%s %s: %s\n", ev.Step, ev.Command, ev.Line)
		}
	}
	return b.String()
}

// A registry the policy does not allow fails the install at once, naming the host and
// the rule that refused it: npm runs offline, since it would retry each refused fetch
// (over CONNECT, for minutes, until the sandbox's memory ran out). A project whose
// packages are all in the cache still installs.
func TestProviderNpmEgressRefusal(t *testing.T) {
	e, env := startWithRegistry(t)
	alice := e.Register(t, "alice")
	for _, reg := range []string{"http://elsewhere.npm.test/", "https://elsewhere.npm.test/"} {
		t.Run(strings.Split(reg, ":")[0], func(t *testing.T) {
			var sb api.Sandbox
			servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "p-" + strings.Split(reg, ":")[0],
				Env: []string{"npm_config_registry=" + reg}}), http.StatusCreated, &sb)
			evs := providerStep(t, alice, sb.ID, "new", api.ProviderRequest{Runtime: "node", Name: "my-site", Dir: "my-site"})
			r, log := result(evs), logText(evs)
			for _, want := range []string{"elsewhere.npm.test (rule network.default", "offline"} {
				if !strings.Contains(r.Error, want) {
					t.Errorf("install from %s, which the policy does not allow: result %q, want it to say %q; log:\n%s", reg, r.Error, want, log)
				}
			}
			if !strings.Contains(log, "ENOTCACHED") {
				t.Errorf("install from %s: npm did not run offline; log:\n%s", reg, log)
			}
		})
	}
	// The packages the allowed registry put in the user's cache install with it refused.
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "warm", Env: env}), http.StatusCreated, &sb)
	if r := result(providerStep(t, alice, sb.ID, "new", api.ProviderRequest{Runtime: "node", Name: "my-site", Dir: "my-site"})); r.Error != "" {
		t.Fatalf("new with the allowed registry: %+v", r)
	}
	execOK(t, alice, sb.ID, "sh", "-c", "cd my-site && rm -rf node_modules && printf 'registry=https://elsewhere.npm.test/\\n' > .npmrc")
	evs := providerStep(t, alice, sb.ID, "build", api.ProviderRequest{Dir: "my-site"})
	if r := result(evs); r.Error != "" || !logged(evs, "elsewhere.npm.test (rule network.default") {
		t.Errorf("build from a warm cache with the registry refused: result %q; log:\n%s", r.Error, logText(evs))
	}
}

// The vibecoding loop (tests/browser/vibe.mjs): the dev sandbox runs the Vite template's
// dev server; a theme change through the file API reaches the page by HMR through the
// proxy, and undo takes it back the same way without restarting the dev server.
func TestBrowserVibecoding(t *testing.T) {
	e, env := startWithRegistry(t)
	alice := e.Register(t, "alice")
	var roles api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
	dev := roles.Dev.ID
	// The project's .npmrc names the registry, as a user's would name their mirror.
	registry, _ := strings.CutPrefix(env[0], "npm_config_")
	servertest.Decode(t, alice.DoToken("PUT", "/api/v1/sandboxes/"+dev+"/files/content?path=my-site/.npmrc", strings.NewReader(registry+"\n")), http.StatusOK, nil)
	if r := result(providerStep(t, alice, dev, "new", api.ProviderRequest{Runtime: "node", Name: "my-site", Dir: "my-site"})); r.Error != "" {
		t.Fatalf("new: %+v", r)
	}
	if r := result(providerStep(t, alice, dev, "preview", api.ProviderRequest{Dir: "my-site"})); r.Error != "" {
		t.Fatalf("preview: %+v", r)
	}
	files, err := provider.Node{}.Scaffold("my-site")
	if err != nil {
		t.Fatal(err)
	}
	theme := strings.Replace(string(files["src/theme.css"]), "--accent: #2563eb", "--accent: #dc2626", 1)
	benv := map[string]string{
		"BASE_URL": e.URL, "USERNAME": "alice", "PASSWORD": "correct horse battery alice",
		"TOKEN": e.Token(t, "alice", "correct horse battery alice"), "SANDBOX": dev,
		"THEME_PATH": "my-site/src/theme.css", "NEW_THEME": theme,
	}
	if d := os.Getenv("SCREENSHOT_DIR"); d != "" {
		benv["SCREENSHOT_DIR"] = d
	}
	out := browsertest.RunFor(t, "vibe", benv, 4*time.Minute)
	if !strings.Contains(out, "vibe=ok") {
		t.Errorf("vibe.mjs: %s", out)
	}
	t.Log(out)
}
