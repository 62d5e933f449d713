package server_test

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/origins"
	"github.com/paddockhq/paddock/internal/servertest"
)

// providerStep runs a provider step through the API and returns its events, the result
// last.
func providerStep(t *testing.T, c *servertest.Client, id, step string, req api.ProviderRequest) []api.ProviderEvent {
	t.Helper()
	resp := c.DoTokenStream("POST", "/api/v1/sandboxes/"+id+"/app/"+step, req)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%s %+v: %d %s, want a 200 event stream", step, req, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var evs []api.ProviderEvent
	if err := paddock.ReadProviderEvents(resp.Body, func(ev api.ProviderEvent) { evs = append(evs, ev) }); err != nil {
		t.Fatalf("%s: reading its events: %v", step, err)
	}
	if len(evs) == 0 || evs[len(evs)-1].Type != api.EventResult {
		t.Fatalf("%s: events %+v, want a result last", step, evs)
	}
	return evs
}

func result(evs []api.ProviderEvent) api.ProviderEvent { return evs[len(evs)-1] }

// ran lists the commands a step started, as "step: command".
func ran(evs []api.ProviderEvent) []string {
	var out []string
	for _, ev := range evs {
		if ev.Type == api.EventProgress && ev.State == "running" {
			out = append(out, ev.Step+": "+ev.Command)
		}
	}
	return out
}

func logged(evs []api.ProviderEvent, s string) bool {
	return slices.ContainsFunc(evs, func(ev api.ProviderEvent) bool { return ev.Type == api.EventLog && strings.Contains(ev.Line, s) })
}

func execOK(t *testing.T, c *servertest.Client, id string, argv ...string) string {
	t.Helper()
	var res api.ExecResult
	servertest.Decode(t, c.DoToken("POST", "/api/v1/sandboxes/"+id+"/exec", api.ExecRequest{Argv: argv}), http.StatusOK, &res)
	if res.ExitCode != 0 {
		t.Fatalf("%q: exit %d: %s%s", argv, res.ExitCode, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}

// A project's steps run in its sandbox with their commands and output streamed; a
// workspace no provider recognises, an unknown runtime, a path out of the workspace and a
// second scaffold into one project are refused before anything runs, saying what was
// wrong.
func TestProviderStatic(t *testing.T) {
	e := servertest.Start(t)
	alice, bob := e.Register(t, "alice"), e.Register(t, "bob")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "p"}), http.StatusCreated, &sb)
	path := "/api/v1/sandboxes/" + sb.ID + "/app/"

	none := servertest.ErrorOf(t, alice.DoToken("POST", path+"build", api.ProviderRequest{}), http.StatusConflict)
	for _, want := range []string{"package.json (node)", "go.mod (go)", "Cargo.toml (rust)", "index.html (static)"} {
		if !strings.Contains(none.Message, want) {
			t.Errorf("build of an empty workspace: %q, want it to list %q", none.Message, want)
		}
	}
	for _, c := range []struct {
		step string
		req  api.ProviderRequest
		want string
	}{
		{"new", api.ProviderRequest{Runtime: "cobol", Name: "x"}, "want one of node, go, rust, static"},
		{"new", api.ProviderRequest{Name: "x"}, "runtime"},
		{"new", api.ProviderRequest{Runtime: "static", Name: "Bad Name"}, "name"},
		{"build", api.ProviderRequest{Dir: "../other"}, "inside the workspace"},
		{"deploy", api.ProviderRequest{}, "want new, build"},
		{"build", api.ProviderRequest{TimeoutSeconds: -1}, "timeout_seconds: -1 is not between 0 and 3600"},
		{"new", api.ProviderRequest{Runtime: "static", Name: "x", TimeoutSeconds: 3601}, "timeout_seconds: 3601 is not between 0 and 3600"},
	} {
		msg := servertest.ErrorOf(t, alice.DoToken("POST", path+c.step, c.req), http.StatusBadRequest).Message
		if !strings.Contains(msg, c.want) {
			t.Errorf("%s %+v: %q, want it to say %q", c.step, c.req, msg, c.want)
		}
	}
	servertest.ErrorOf(t, bob.DoToken("POST", path+"build", api.ProviderRequest{}), http.StatusNotFound)

	site := api.ProviderRequest{Dir: "site"}
	evs := providerStep(t, alice, sb.ID, "new", api.ProviderRequest{Runtime: "static", Name: "my-site", Dir: "site"})
	if r := result(evs); r.Error != "" || r.Runtime != "static" || r.Dir != "site" {
		t.Fatalf("new static: result %+v", r)
	}
	if got := ran(evs); !slices.Equal(got, []string{"scaffold: write index.html", "scaffold: write style.css"}) {
		t.Errorf("new static ran %q", got)
	}
	if page := execOK(t, alice, sb.ID, "cat", "site/index.html"); !strings.Contains(page, "<h1>my-site</h1>") {
		t.Errorf("scaffolded index.html: %q", page)
	}
	again := servertest.ErrorOf(t, alice.DoToken("POST", path+"new", api.ProviderRequest{Runtime: "static", Dir: "site"}), http.StatusConflict)
	if !strings.Contains(again.Message, "holds a static project already") {
		t.Errorf("a second new into site: %q", again.Message)
	}

	if evs := providerStep(t, alice, sb.ID, "build", site); result(evs).Error != "" || !logged(evs, "nothing to build for a static project") {
		t.Errorf("build static: %+v", evs)
	}
	evs = providerStep(t, alice, sb.ID, "package", site)
	if r := result(evs); r.Error != "" || r.Artifact != "site/.paddock/package/static.tar.gz" {
		t.Fatalf("package static: %+v", evs)
	}
	if list := execOK(t, alice, sb.ID, "tar", "-tzf", "site/.paddock/package/static.tar.gz"); !strings.Contains(list, "./index.html") || strings.Contains(list, ".paddock") {
		t.Errorf("the static package holds %q, want index.html and not its own .paddock", list)
	}
	pv := result(providerStep(t, alice, sb.ID, "preview", site)).Preview
	if pv == nil || pv.Port != 8080 || !pv.HotReload || pv.Dir != "site" {
		t.Errorf("preview static: %+v", pv)
	}
	if r := result(providerStep(t, alice, sb.ID, "clean", site)); r.Error != "" {
		t.Errorf("clean: %+v", r)
	}
	if ls := execOK(t, alice, sb.ID, "ls", "-A", "site"); strings.Contains(ls, ".paddock") {
		t.Errorf("after clean, site holds %q", ls)
	}
}

// An existing npm project's own scripts are its steps: build runs npm install then its
// build script, validate its lint and test scripts, and package refuses a project whose
// tests fail, naming the failing script. A corrupt package.json is refused saying so.
func TestProviderNodeProject(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "p"}), http.StatusCreated, &sb)
	execOK(t, alice, sb.ID, "sh", "-c", `mkdir app && cd app && cat > package.json <<'JSON'
{"name": "app", "version": "1.0.0", "scripts": {
  "build": "mkdir -p dist && echo '<p>built</p>' > dist/index.html && echo built the app",
  "lint": "echo lint is clean",
  "test": "node test.js",
  "dev": "node server.js"}}
JSON
echo 'console.log("tests pass")' > test.js
echo 'require("http").createServer((q, s) => s.end("node dev")).listen(process.env.PORT)' > server.js`)
	app := api.ProviderRequest{Dir: "app"}

	evs := providerStep(t, alice, sb.ID, "build", app)
	if r := result(evs); r.Error != "" || r.Runtime != "node" {
		t.Fatalf("build: %+v", evs)
	}
	if got := ran(evs); !slices.Equal(got, []string{"resolve: npm install", "build: npm run build"}) || !logged(evs, "built the app") {
		t.Errorf("build ran %q, want npm install then the build script, with its output", got)
	}
	evs = providerStep(t, alice, sb.ID, "validate", app)
	if got := ran(evs); result(evs).Error != "" || !slices.Equal(got, []string{"resolve: npm install", "validate: npm run lint", "validate: npm run test"}) || !logged(evs, "tests pass") {
		t.Errorf("validate: ran %q, result %+v", got, result(evs))
	}
	pv := result(providerStep(t, alice, sb.ID, "preview", app)).Preview
	if pv == nil || strings.Join(pv.Command, " ") != "npm run dev" || pv.HotReload || !slices.Contains(pv.Env, "PORT=8080") {
		t.Errorf("preview of a project whose dev script is not vite: %+v", pv)
	}

	execOK(t, alice, sb.ID, "sh", "-c", `echo 'require("fs").writeFileSync("half-done", ""); console.error("1 test failed: adds"); process.exit(3)' > app/test.js`)
	evs = providerStep(t, alice, sb.ID, "package", app)
	r := result(evs)
	if !strings.Contains(r.Error, "npm run test") || !strings.Contains(r.Error, "exit status 3") || r.Artifact != "" {
		t.Errorf("package of a project whose tests fail: result %+v, want the failing script named and no artifact", r)
	}
	if slices.Contains(ran(evs), "package: npm run build") || !logged(evs, "1 test failed: adds") {
		t.Errorf("package with failing tests ran %q", ran(evs))
	}
	// The failed step ran as one transaction, rolled back: what it wrote is gone.
	if ls := execOK(t, alice, sb.ID, "ls", "app"); strings.Contains(ls, "half-done") || !logged(evs, "the workspace is as it was before package") {
		t.Errorf("after a failed package the project holds %q", ls)
	}
	// A transaction already open (the user's, or one a step did not finish) refuses a step.
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/history/transaction", api.BeginRequest{Message: "mine"}), http.StatusCreated, nil)
	if r := result(providerStep(t, alice, sb.ID, "validate", app)); !strings.Contains(r.Error, "transaction") || !strings.Contains(r.Error, "mine") {
		t.Errorf("validate while a transaction is open: %+v", r)
	}
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/history/transaction/rollback", nil), http.StatusOK, nil)

	execOK(t, alice, sb.ID, "sh", "-c", `echo '{"scripts": {' > app/package.json`)
	msg := servertest.ErrorOf(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/app/build", app), http.StatusBadRequest).Message
	if !strings.Contains(msg, "package.json is not valid JSON") {
		t.Errorf("build with a corrupt package.json: %q", msg)
	}
}

// A new Go module is scaffolded, vetted and tested with the sandbox's toolchain, and
// packaged as its binary.
func TestProviderGo(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "p"}), http.StatusCreated, &sb)
	svc := api.ProviderRequest{Dir: "svc"}
	if r := result(providerStep(t, alice, sb.ID, "new", api.ProviderRequest{Runtime: "go", Dir: "svc"})); r.Error != "" || r.Runtime != "go" {
		t.Fatalf("new go: %+v", r)
	}
	evs := providerStep(t, alice, sb.ID, "package", svc)
	if got := ran(evs); result(evs).Error != "" || !slices.Contains(got, "validate: go vet") || !slices.Contains(got, "validate: go test") {
		t.Fatalf("package go: ran %q, result %+v", got, result(evs))
	}
	var art api.Artifact
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/artifacts/"+result(evs).ArtifactID, nil), http.StatusOK, &art)
	if art.Manifest == nil || art.Manifest.Lockfile != "" {
		t.Errorf("a module without go.sum: manifest %+v, want no lockfile", art.Manifest)
	}
	// A go.sum the build does not need is still what the SBOM lists.
	execOK(t, alice, sb.ID, "sh", "-c", "echo 'github.com/google/uuid v1.6.0 h1:NIvaJDMOsjHA8n1jAhLSgzrAzy1Hgr+hNrb57e+94F0=' > svc/go.sum")
	if evs = providerStep(t, alice, sb.ID, "package", svc); result(evs).Error != "" {
		t.Fatalf("package go with go.sum: %+v; log:\n%s", result(evs), logText(evs))
	}
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/artifacts/"+result(evs).ArtifactID, nil), http.StatusOK, &art)
	if m := art.Manifest; m == nil || !strings.HasPrefix(m.Toolchain["go"], "go1.") || m.Lockfile != "go.sum" || len(m.Files) != 1 || m.Files[0].Path != "app" {
		t.Errorf("the go artifact: %+v", art.Manifest)
	}
	resp := alice.DoToken("GET", "/api/v1/artifacts/"+result(evs).ArtifactID+"/sbom", nil)
	sbom, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(sbom), `"purl": "pkg:golang/github.com/google/uuid@v1.6.0"`) {
		t.Errorf("the go SBOM does not list go.sum's module:\n%s", sbom)
	}
	if !logged(evs, "ok  \tsvc") {
		t.Errorf("package go: the tests' output is not in the log: %+v", evs)
	}
	if list := execOK(t, alice, sb.ID, "tar", "-tzf", result(evs).Artifact); !strings.Contains(list, "./app") {
		t.Errorf("the go package holds %q, want the binary", list)
	}
	pv := result(providerStep(t, alice, sb.ID, "preview", svc)).Preview
	if pv == nil || !slices.Contains(pv.Env, "PORT=8080") || pv.HotReload {
		t.Errorf("preview go: %+v", pv)
	}
}

// A preview makes the provider's dev server the sandbox's app, served through the proxy;
// with a server that reloads changed files itself an undo does not restart it. A user's
// own command and port replace the app the same way, and reset brings back the default.
func TestProviderPreviewServes(t *testing.T) {
	e := servertest.Start(t)
	alice, bob := e.Register(t, "alice"), e.Register(t, "bob")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "p"}), http.StatusCreated, &sb)
	appURL := e.AppsURL(origins.Host{Kind: origins.KindApp, ID: sb.ID})
	page := func() string {
		t.Helper()
		resp := alice.AppToken(appURL, "GET", "/", nil)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("the sandbox's app: %d %s", resp.StatusCode, b)
		}
		return string(b)
	}
	if !strings.Contains(page(), "Your paddock sandbox is running") {
		t.Fatal("the default app is not the welcome page")
	}

	site := api.ProviderRequest{Dir: "site"}
	providerStep(t, alice, sb.ID, "new", api.ProviderRequest{Runtime: "static", Name: "my-site", Dir: "site"})
	r := result(providerStep(t, alice, sb.ID, "preview", site))
	if r.Error != "" || r.URL == "" {
		t.Fatalf("preview: %+v", r)
	}
	if got := page(); !strings.Contains(got, "<h1>my-site</h1>") {
		t.Fatalf("after preview the app serves %q, want the site", got)
	}
	var got api.Sandbox
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID, nil), http.StatusOK, &got)
	if got.App.Dir != "site" || !got.App.HotReload || got.App.Port != 8080 {
		t.Errorf("the sandbox's app after preview: %+v", got.App)
	}

	execOK(t, alice, sb.ID, "sh", "-c", "echo '<h1>changed</h1>' > site/index.html")
	if !strings.Contains(page(), "changed") {
		t.Fatal("the change is not served")
	}
	var undo api.RestoreResult
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/history/undo", nil), http.StatusOK, &undo)
	if undo.AppRestarted || !strings.Contains(undo.AppNote, "reloads changed files itself") {
		t.Errorf("undo under a hot-reloading app: restarted %v, note %q", undo.AppRestarted, undo.AppNote)
	}
	if !strings.Contains(page(), "<h1>my-site</h1>") {
		t.Error("after undo the old page is not served")
	}

	servertest.ErrorOf(t, bob.DoToken("PUT", "/api/v1/sandboxes/"+sb.ID+"/app", api.Template{Command: []string{"true"}, Port: 80}), http.StatusNotFound)
	msg := servertest.ErrorOf(t, alice.DoToken("PUT", "/api/v1/sandboxes/"+sb.ID+"/app", api.Template{Command: []string{"x"}, Port: 80, Dir: "../up"}), http.StatusBadRequest).Message
	if !strings.Contains(msg, "app.dir") {
		t.Errorf("an app dir out of the workspace: %q", msg)
	}
	execOK(t, alice, sb.ID, "mkdir", "own")
	servertest.Decode(t, alice.DoToken("PUT", "/api/v1/sandboxes/"+sb.ID+"/app", api.Template{
		Command: []string{"sh", "-c", "echo mine > index.html && exec python3 -m http.server 9000"}, Port: 9000, Dir: "own"}), http.StatusOK, &got)
	if got.App.Port != 9000 || page() != "mine\n" {
		t.Errorf("own app: %+v serves %q", got.App, page())
	}
	servertest.Decode(t, alice.DoToken("PUT", "/api/v1/sandboxes/"+sb.ID+"/app", api.Template{}), http.StatusOK, &got)
	if !strings.Contains(page(), "Your paddock sandbox is running") {
		t.Error("after reset the app is not the welcome page")
	}
}

// A step's log is live: a command's output arrives while it runs. The build here waits
// for a file that the test makes only once the build's first line has arrived.
func TestProviderLiveLog(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "p"}), http.StatusCreated, &sb)
	execOK(t, alice, sb.ID, "sh", "-c", `mkdir app && echo '{"scripts": {"build": "echo waiting for go; while [ ! -f go ]; do sleep 0.1; done; echo went"}}' > app/package.json`)
	resp := alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/app/build", api.ProviderRequest{Dir: "app"})
	defer resp.Body.Close()
	var evs []api.ProviderEvent
	touched := false
	err := paddock.ReadProviderEvents(resp.Body, func(ev api.ProviderEvent) {
		evs = append(evs, ev)
		if !touched && ev.Type == api.EventLog && ev.Line == "waiting for go" {
			touched = true
			execOK(t, alice, sb.ID, "touch", "app/go")
		}
	})
	if err != nil || !touched {
		t.Fatalf("the build's first line did not arrive while it ran (read: %v); events %+v", err, evs)
	}
	if r := result(evs); r.Error != "" || !logged(evs, "went") {
		t.Errorf("build: %+v; log:\n%s", r, logText(evs))
	}
}

// A new cargo package is built, tested and linted with Debian's toolchain, offline from the
// packaged crates, packaged as its binary, and previewed as the sandbox's app. A project
// using a packaged crate gets it from there and lists it in its SBOM; a crate no package
// provides fails the step naming it.
func TestProviderRust(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "p"}), http.StatusCreated, &sb)
	svc := api.ProviderRequest{Dir: "svc"}
	if r := result(providerStep(t, alice, sb.ID, "new", api.ProviderRequest{Runtime: "rust", Dir: "svc"})); r.Error != "" || r.Runtime != "rust" {
		t.Fatalf("new rust: %+v", r)
	}
	evs := providerStep(t, alice, sb.ID, "package", svc)
	if got := ran(evs); result(evs).Error != "" || !slices.Equal(got, []string{"resolve: cargo fetch", "validate: cargo test", "validate: cargo clippy",
		"package: cargo build", "package: copy the binary", "package: archive .paddock/out", "store: store svc/.paddock/package/rust.tar.gz"}) {
		t.Fatalf("package rust: ran %q, result %+v; log:\n%s", got, result(evs), logText(evs))
	}
	if !logged(evs, "test tests::greets ... ok") {
		t.Errorf("package rust: the tests' output is not in the log:\n%s", logText(evs))
	}
	var art api.Artifact
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/artifacts/"+result(evs).ArtifactID, nil), http.StatusOK, &art)
	if m := art.Manifest; m == nil || !strings.HasPrefix(m.Toolchain["rustc"], "rustc 1.") || !strings.HasPrefix(m.Toolchain["cargo"], "cargo 1.") ||
		len(m.Files) != 1 || m.Files[0].Path != "app" {
		t.Errorf("the rust artifact: %+v", art.Manifest)
	}

	r := result(providerStep(t, alice, sb.ID, "preview", svc))
	if r.Error != "" || r.Preview == nil || r.Preview.HotReload {
		t.Fatalf("preview rust: %+v", r)
	}
	// The app runs once cargo has built it: wait for it, as a person reloading would.
	var page []byte
	var resp *http.Response
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		resp = alice.AppToken(e.AppsURL(origins.Host{Kind: origins.KindApp, ID: sb.ID}), "GET", "/", nil)
		page, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK || time.Now().After(deadline) {
			break
		}
	}
	if resp.StatusCode != http.StatusOK || string(page) != "hello from svc\n" {
		t.Errorf("the previewed binary serves %d %q", resp.StatusCode, page)
	}

	execOK(t, alice, sb.ID, "sh", "-c", `mkdir num && cd num && mkdir src && printf '[package]\nname = "num"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\nitoa = "1"\n' > Cargo.toml &&
echo 'fn main() { println!("{}", itoa::Buffer::new().format(42)); }' > src/main.rs`)
	num := api.ProviderRequest{Dir: "num"}
	if evs = providerStep(t, alice, sb.ID, "package", num); result(evs).Error != "" || !logged(evs, "Compiling itoa v1.0.1") {
		t.Fatalf("package a project using a packaged crate: %+v; log:\n%s", result(evs), logText(evs))
	}
	resp = alice.DoToken("GET", "/api/v1/artifacts/"+result(evs).ArtifactID+"/sbom", nil)
	sbom, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(sbom), `"purl": "pkg:cargo/itoa@1.0.1"`) {
		t.Errorf("the rust SBOM does not list Cargo.lock's crate:\n%s", sbom)
	}

	execOK(t, alice, sb.ID, "sh", "-c", `printf 'no-such-crate-here = "1"\n' >> num/Cargo.toml`)
	r = result(providerStep(t, alice, sb.ID, "build", num))
	if !strings.Contains(r.Error, "cargo fetch") || !strings.Contains(r.Error, "no-such-crate-here") {
		t.Errorf("build with a crate no package provides: %+v", r)
	}
	execOK(t, alice, sb.ID, "sh", "-c", `echo '[package' > num/Cargo.toml`)
	msg := servertest.ErrorOf(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/app/build", num), http.StatusBadRequest).Message
	if !strings.Contains(msg, "Cargo.toml is not valid TOML") {
		t.Errorf("build with a corrupt Cargo.toml: %q", msg)
	}
}

// A step without a directory, in a workspace whose one project is in a directory (as
// "paddock app new NAME" makes), runs on that project; with several, it is refused naming
// them.
func TestProviderFindsTheOnlyProject(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "p"}), http.StatusCreated, &sb)
	if r := result(providerStep(t, alice, sb.ID, "new", api.ProviderRequest{Runtime: "static", Name: "my-site"})); r.Error != "" || r.Dir != "." {
		t.Fatalf("new static into the workspace: %+v", r)
	}
	execOK(t, alice, sb.ID, "sh", "-c", "mkdir my-site && mv index.html style.css my-site/ && mkdir .hidden notes && touch .hidden/index.html notes/todo.txt")
	if r := result(providerStep(t, alice, sb.ID, "build", api.ProviderRequest{})); r.Error != "" || r.Dir != "my-site" || r.Runtime != "static" {
		t.Errorf("build with one project, in my-site: %+v, want it built there", r)
	}
	execOK(t, alice, sb.ID, "sh", "-c", "mkdir other && echo '{}' > other/package.json")
	msg := servertest.ErrorOf(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/app/build", api.ProviderRequest{}), http.StatusConflict).Message
	if !strings.Contains(msg, "package.json (node)") || !strings.Contains(msg, "these directories hold projects: my-site, other") {
		t.Errorf("build with two projects and no dir: %q, want what was looked for and both named", msg)
	}
}
