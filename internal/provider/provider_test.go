package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/provider"
)

// Vite's dev server is told to listen on the app port on every address and says it
// reloads by itself; any other dev script gets PORT and is restarted on change.
func TestNodePreview(t *testing.T) {
	for _, c := range []struct {
		dev     string
		want    string
		hotLoad bool
	}{
		{"vite", "npm run dev -- --host 0.0.0.0 --port 8080 --strictPort", true},
		{"vite --mode staging", "npm run dev -- --host 0.0.0.0 --port 8080 --strictPort", true},
		{"node server.js", "npm run dev", false},
		{"", "npm start", false},
	} {
		p := provider.Project{Runtime: "node", Dir: "app", Scripts: map[string]string{}}
		if c.dev != "" {
			p.Scripts["dev"] = c.dev
		}
		pv := provider.Node{}.Preview(p, 8080)
		if got := strings.Join(pv.Command, " "); got != c.want || pv.HotReload != c.hotLoad || pv.Dir != "app" || pv.Port != 8080 {
			t.Errorf("dev script %q: %+v, want %q hot reload %v", c.dev, pv, c.want, c.hotLoad)
		}
	}
}

// The Vite template pins its packages and is itself a project the node provider builds
// with its dev server: what `app new --runtime node` makes, `app preview` serves with HMR.
func TestNodeTemplate(t *testing.T) {
	files, err := provider.Node{}.Scaffold("my-site")
	if err != nil {
		t.Fatal(err)
	}
	scripts, err := provider.ParsePackageJSON(files["package.json"])
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct {
		Name string
		Deps map[string]string `json:"dependencies"`
		Dev  map[string]string `json:"devDependencies"`
	}
	if err := json.Unmarshal(files["package.json"], &pkg); err != nil {
		t.Fatal(err)
	}
	for name, v := range pkg.Dev {
		if strings.ContainsAny(v, "^~*x") {
			t.Errorf("%s@%s: not pinned", name, v)
		}
	}
	if pkg.Name != "my-site" || pkg.Dev["vite"] == "" || pkg.Deps["react"] == "" {
		t.Errorf("package.json: %s", files["package.json"])
	}
	// npm ci installs only when the lockfile's root agrees with package.json.
	var lock struct {
		Name     string
		Packages map[string]struct {
			Name string
			Deps map[string]string `json:"dependencies"`
			Dev  map[string]string `json:"devDependencies"`
		}
	}
	if err := json.Unmarshal(files["package-lock.json"], &lock); err != nil {
		t.Fatal(err)
	}
	root := lock.Packages[""]
	if lock.Name != "my-site" || root.Name != "my-site" || !maps.Equal(root.Deps, pkg.Deps) || !maps.Equal(root.Dev, pkg.Dev) {
		t.Errorf("the lockfile's root %+v does not match package.json %+v", root, pkg)
	}
	pv := provider.Node{}.Preview(provider.Project{Scripts: scripts}, 8080)
	if !pv.HotReload || files["src/theme.css"] == nil || !strings.Contains(string(files["src/theme.css"]), "--accent") {
		t.Errorf("the template's preview %+v, theme %q", pv, files["src/theme.css"])
	}
}

func TestCleanDir(t *testing.T) {
	for _, c := range []struct {
		in, want string
		bad      bool
	}{
		{"", ".", false}, {"site", "site", false}, {"a/../b/", "b", false}, {"./x", "x", false},
		{"/etc", "", true}, {"..", "", true}, {"../x", "", true}, {"a/../../x", "", true}, {"a\x00b", "", true},
	} {
		got, err := provider.CleanDir(c.in)
		if c.bad != (err != nil) || got != c.want {
			t.Errorf("CleanDir(%q) = %q, %v", c.in, got, err)
		}
		if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("CleanDir(%q): %v, want invalid argument", c.in, err)
		}
	}
}

func TestLookup(t *testing.T) {
	if _, err := provider.Lookup("cobol"); err == nil || !strings.Contains(err.Error(), "want one of node, go, rust, static") {
		t.Errorf("Lookup(cobol): %v", err)
	}
	for _, p := range provider.Providers {
		if q, err := provider.Lookup(p.ID()); err != nil || q.ID() != p.ID() {
			t.Errorf("Lookup(%s): %v", p.ID(), err)
		}
	}
	ids := []string{}
	for _, p := range provider.Providers {
		ids = append(ids, p.ID())
	}
	if ids[len(ids)-1] != "static" || !slices.Contains(ids, "node") {
		t.Errorf("detection order %q: static must come last", ids)
	}
}

// A Cargo.toml names the binary; a workspace manifest or broken TOML is refused saying so.
func TestParseCargoToml(t *testing.T) {
	for _, c := range []struct{ in, want, err string }{
		{"[package]\nname = \"svc\"\nversion = \"0.1.0\"\n", "svc", ""},
		{"[workspace]\nmembers = [\"a\"]\n", "", "no [package] name"},
		{"[package\nname=", "", "not valid TOML"},
	} {
		got, err := provider.ParseCargoToml([]byte(c.in))
		if got != c.want || (c.err == "") != (err == nil) || err != nil && (!strings.Contains(err.Error(), c.err) || !errors.Is(err, errdefs.ErrInvalidArgument)) {
			t.Errorf("ParseCargoToml(%q) = %q, %v; want %q, %q", c.in, got, err, c.want, c.err)
		}
	}
}

// The rust provider's steps never reach for crates.io: every cargo command is offline,
// with crates.io replaced by the packaged crates.
func TestRustOffline(t *testing.T) {
	r, p := provider.Rust{}, provider.Project{Runtime: "rust", Dir: "svc", Name: "svc"}
	pkg, out := r.Package(p)
	cmds := slices.Concat(r.Resolve(p), r.Build(p), r.Validate(p), pkg)
	for _, c := range cmds {
		if c.Argv[0] != "cargo" {
			continue
		}
		if a := strings.Join(c.Argv, " "); !strings.Contains(a, "--offline") || !strings.Contains(a, provider.CrateRegistry) {
			t.Errorf("%s: %q, want offline from %s", c.Name, a, provider.CrateRegistry)
		}
	}
	if out != ".paddock/out" {
		t.Errorf("package output %q", out)
	}
	pv := r.Preview(p, 8080)
	if a := strings.Join(pv.Command, " "); !strings.Contains(a, "--offline") || pv.HotReload || !slices.Contains(pv.Env, "PORT=8080") {
		t.Errorf("preview %+v", pv)
	}
}

func FuzzParseCargoToml(f *testing.F) {
	f.Add([]byte("[package]\nname = \"svc\"\n"))
	f.Add([]byte("[workspace]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		name, err := provider.ParseCargoToml(b)
		if err == nil && name == "" {
			t.Error("no error and no name")
		}
		if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%v: want invalid argument", err)
		}
	})
}

func FuzzParsePackageJSON(f *testing.F) {
	f.Add([]byte(`{"scripts": {"build": "vite build"}}`))
	f.Add([]byte(`{"scripts": null}`))
	f.Add([]byte(`{"scripts": {"a": 1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		scripts, err := provider.ParsePackageJSON(b)
		if err == nil && scripts == nil {
			t.Error("no error and no scripts map")
		}
		if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%v: want invalid argument", err)
		}
	})
}

// files is a workspace of files held in memory, for what a provider reads.
type files map[string]string

func (f files) ReadFile(_ context.Context, name string) ([]byte, error) {
	if b, ok := f[name]; ok {
		return []byte(b), nil
	}
	return nil, provider.ErrNoFile
}

func (f files) WriteFile(context.Context, string, []byte) error { return errors.ErrUnsupported }

// A step's network is its provider's registries: the public ones by default, a mirror the
// sandbox's environment or the project's .npmrc names instead (and its scopes'), none for
// the offline providers.
func TestRegistries(t *testing.T) {
	for _, c := range []struct {
		p     provider.RuntimeProvider
		env   []string
		npmrc string
		want  []string
	}{
		{provider.Node{}, nil, "", []string{"registry.npmjs.org"}},
		{provider.Node{}, []string{"npm_config_registry=http://registry.npm.test:4873/"}, "", []string{"registry.npm.test"}},
		{provider.Node{}, []string{"NPM_CONFIG_REGISTRY=https://Mirror.Example/npm/"}, "", []string{"mirror.example"}},
		{provider.Node{}, []string{"npm_config_registry=not a url"}, "", []string{"registry.npmjs.org"}},
		{provider.Node{}, nil, "; mirror\nregistry = \"http://npm.corp.example:8080/\"\n@acme:registry=https://npm.acme.example/\n", []string{"npm.corp.example", "npm.acme.example"}},
		{provider.Node{}, nil, "@acme:registry=https://npm.acme.example/\nregistry=${NPM_MIRROR}\n", []string{"registry.npmjs.org", "npm.acme.example"}},
		{provider.Node{}, []string{"npm_config_registry=http://a.example/"}, "registry=http://b.example/\n", []string{"a.example", "b.example"}},
		{provider.Go{}, nil, "", []string{"proxy.golang.org", "sum.golang.org"}},
		{provider.Go{}, []string{"GOPROXY=http://127.0.0.1:3000|https://goproxy.example,direct", "GOSUMDB=off"}, "", []string{"127.0.0.1", "goproxy.example"}},
		{provider.Go{}, []string{"GOPROXY=off", "GOSUMDB=sum.golang.org+033de0ae+Ac4zctda0e5eza+HJyk9SxEdh+s3Ux18htTTAD8OuAn8 https://sum.example/db"}, "", []string{"sum.example"}},
		{provider.Go{}, []string{"GOSUMDB=gosum.example+key"}, "", []string{"proxy.golang.org", "gosum.example"}},
		{provider.Rust{}, []string{"CARGO_HOME=/x"}, "", nil},
		{provider.Static{}, nil, "", nil},
	} {
		ws := files{}
		if c.npmrc != "" {
			ws["app/.npmrc"] = c.npmrc
		}
		got, err := c.p.Registries(context.Background(), ws, provider.Project{Runtime: c.p.ID(), Dir: "app"}, c.env)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s.Registries(%q, .npmrc %q) = %q, %v; want %q", c.p.ID(), c.env, c.npmrc, got, err, c.want)
		}
	}
}

// NpmrcRegistries reads a project's .npmrc, which the sandbox writes: any bytes give
// hosts that are names, never a panic.
func FuzzNpmrcRegistries(f *testing.F) {
	f.Add([]byte("registry=https://r.example/\n@s:registry=http://s.example:1/\n"))
	f.Add([]byte("registry = \"${X}\"\n# c\n;c\n="))
	f.Fuzz(func(t *testing.T, b []byte) {
		main, scoped := provider.NpmrcRegistries(b)
		for _, h := range append(scoped, main) {
			if strings.ContainsAny(h, "/ \n@") || h != strings.ToLower(h) {
				t.Fatalf("host %q from %q", h, b)
			}
		}
	})
}
