package provider

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// Node is an npm project: a package.json, whose build, test, lint and dev scripts are its
// steps. Its template is a Vite + React app.
type Node struct{}

var _ RuntimeProvider = Node{}

func (Node) ID() string        { return "node" }
func (Node) Markers() []string { return []string{"package.json"} }

func (n Node) Detect(ctx context.Context, ws Workspace, dir string) (Project, bool, error) {
	b, err := ws.ReadFile(ctx, path.Join(dir, "package.json"))
	if errors.Is(err, ErrNoFile) {
		return Project{}, false, nil
	} else if err != nil {
		return Project{}, false, err
	}
	scripts, err := ParsePackageJSON(b)
	if err != nil {
		return Project{}, false, err
	}
	return Project{Runtime: n.ID(), Dir: dir, Scripts: scripts}, true, nil
}

// maxPackageJSON bounds the package.json read: a real one is a few KiB.
const maxPackageJSON = 1 << 20

// ParsePackageJSON is the scripts of a package.json.
func ParsePackageJSON(b []byte) (map[string]string, error) {
	if len(b) > maxPackageJSON {
		return nil, fmt.Errorf("package.json: %d bytes, more than %d: %w", len(b), maxPackageJSON, errdefs.ErrInvalidArgument)
	}
	var pkg struct {
		Scripts map[string]string `json:"scripts"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		return nil, fmt.Errorf("package.json is not valid JSON (%v): fix it or run npm init: %w", err, errdefs.ErrInvalidArgument)
	}
	if pkg.Scripts == nil {
		pkg.Scripts = map[string]string{}
	}
	return pkg.Scripts, nil
}

// npmFlags keep npm's output to what a person reads in a build log.
var npmFlags = []string{"--no-audit", "--no-fund", "--no-update-notifier"}

// checkLock fails, saying why, on a package-lock.json that is not JSON: npm ci reports
// only its usage then, without naming the file.
const checkLock = `node -e 'try { JSON.parse(require("fs").readFileSync("package-lock.json", "utf8")) } catch (e) {
  console.error("package-lock.json is not valid JSON (" + e.message + "): fix it, or remove it to have npm install make a new one"); process.exit(1) }'`

// upToDate succeeds when node_modules holds what package-lock.json pins: npm writes its
// record of the install (node_modules/.package-lock.json) last, so a record newer than
// package.json and package-lock.json means neither changed since, and npm ci would delete
// and rewrite the same tree (a preview after "new", a second build). A restore or an edit
// writes the file anew, which makes it newer.
const upToDate = `[ node_modules/.package-lock.json -nt package-lock.json ] && [ node_modules/.package-lock.json -nt package.json ]`

// Offline is npm's offline mode: a refused registry is otherwise retried, each of the
// install's fetches with its back-off, for minutes.
func (Node) Offline() []string { return []string{"npm_config_offline=true"} }

// Resolve installs the dependencies: exactly the lockfile's when there is one, unless
// node_modules holds them already.
func (Node) Resolve(Project) []Command {
	flags := strings.Join(npmFlags, " ")
	return []Command{{Name: "npm install", Argv: []string{"sh", "-c",
		"if [ -f package-lock.json ]; then if " + upToDate + "; then echo 'node_modules is up to date with package-lock.json: npm ci skipped'; exit 0; fi; " +
			checkLock + " && exec npm ci " + flags + "; else exec npm install " + flags + "; fi"}}}
}

func (Node) Build(p Project) []Command { return scripts(p, "build") }

// Validate runs the project's lint and test scripts, those it has.
func (Node) Validate(p Project) []Command { return scripts(p, "lint", "test") }

// Package builds; the output is Vite's dist, or the project itself without a build.
func (n Node) Package(p Project) ([]Command, string) {
	if _, ok := p.Scripts["build"]; ok {
		return n.Build(p), "dist"
	}
	return nil, "."
}

// Preview runs the dev script. Vite's is told where to listen and reloads by itself (HMR);
// another dev or start script gets the port in PORT.
func (Node) Preview(p Project, port int) api.ProviderPreview {
	pv := api.ProviderPreview{Dir: p.Dir, Port: port, Ready: "/", Env: []string{"PORT=" + strconv.Itoa(port)}}
	dev, ok := p.Scripts["dev"]
	switch {
	case ok && strings.HasPrefix(strings.TrimSpace(dev), "vite"):
		pv.Command = []string{"npm", "run", "dev", "--", "--host", "0.0.0.0", "--port", strconv.Itoa(port), "--strictPort"}
		pv.HotReload = true
	case ok:
		pv.Command = []string{"npm", "run", "dev"}
	default:
		pv.Command = []string{"npm", "start"}
	}
	return pv
}

func (Node) Cleanup(Project) []string { return []string{"node_modules", "dist", ".paddock"} }

// Registries is npm's registry: the ones npm_config_registry and the project's .npmrc
// name (its scopes' too), else the public one.
func (Node) Registries(ctx context.Context, ws Workspace, p Project, env []string) ([]string, error) {
	var hosts []string
	if v, ok := lookupEnv(env, "npm_config_registry", true); ok {
		hosts = addHost(hosts, hostOf(v))
	}
	b, err := ws.ReadFile(ctx, path.Join(p.Dir, ".npmrc"))
	if err != nil && !errors.Is(err, ErrNoFile) {
		return nil, err
	}
	main, scoped := NpmrcRegistries(b)
	hosts = addHost(hosts, main)
	if len(hosts) == 0 {
		hosts = append(hosts, "registry.npmjs.org")
	}
	for _, h := range scoped {
		hosts = addHost(hosts, h)
	}
	return hosts, nil
}

// maxNpmrc bounds the .npmrc read for its registries.
const maxNpmrc = 64 << 10

// NpmrcRegistries reads an .npmrc for the hosts of its registry (main, "" when it names
// none) and of its scopes' registries ("@scope:registry=…"). A value npm would expand
// from the environment ("${…}") names no host here.
func NpmrcRegistries(b []byte) (main string, scoped []string) {
	if len(b) > maxNpmrc {
		b = b[:maxNpmrc]
	}
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.Trim(strings.TrimSpace(v), `"'`)
		if strings.Contains(v, "${") {
			continue
		}
		switch {
		case k == "registry":
			main = hostOf(v)
		case strings.HasPrefix(k, "@") && strings.HasSuffix(k, ":registry"):
			scoped = addHost(scoped, hostOf(v))
		}
	}
	return main, scoped
}

func scripts(p Project, names ...string) []Command {
	var cmds []Command
	for _, n := range names {
		if _, ok := p.Scripts[n]; ok {
			cmds = append(cmds, Command{Name: "npm run " + n, Argv: []string{"npm", "run", n}})
		}
	}
	return cmds
}

// Scaffold is a Vite + React app whose theme is CSS variables in src/theme.css.
func (Node) Scaffold(name string) (map[string][]byte, error) {
	pkg, err := json.MarshalIndent(map[string]any{
		"name": name, "private": true, "version": "0.1.0", "type": "module",
		"scripts":         map[string]string{"dev": "vite", "build": "vite build", "preview": "vite preview"},
		"dependencies":    map[string]string{"react": viteTemplate.react, "react-dom": viteTemplate.react},
		"devDependencies": map[string]string{"vite": viteTemplate.vite, "@vitejs/plugin-react": viteTemplate.pluginReact},
	}, "", "  ")
	if err != nil {
		return nil, err
	}
	lock, err := templateLock(name)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		"package.json":      append(pkg, '\n'),
		"package-lock.json": lock,
		"vite.config.js": []byte(`import { defineConfig } from 'vite'
import react from '@vitejs/plugin-react'

// The dev server is reached only through paddock's proxy, which decides who may, on
// the user's own apps host: Vite need not check the Host itself.
export default defineConfig({
  plugins: [react()],
  server: { allowedHosts: true },
})
`),
		"index.html": []byte(`<!doctype html>
<html lang="en">
  <head>
    <meta charset="UTF-8" />
    <meta name="viewport" content="width=device-width, initial-scale=1.0" />
    <title>` + name + `</title>
  </head>
  <body>
    <div id="root"></div>
    <script type="module" src="/src/main.jsx"></script>
  </body>
</html>
`),
		"src/main.jsx": []byte(`import React from 'react'
import ReactDOM from 'react-dom/client'
import App from './App.jsx'
import './theme.css'

ReactDOM.createRoot(document.getElementById('root')).render(<App />)
`),
		"src/App.jsx": []byte(`import { useState } from 'react'

export default function App() {
  const [count, setCount] = useState(0)
  return (
    <main>
      <h1>` + name + `</h1>
      <button onClick={() => setCount(count + 1)}>count is {count}</button>
      <p>Edit src/App.jsx or src/theme.css: the page updates as you save.</p>
    </main>
  )
}
`),
		"src/theme.css": []byte(`:root {
  --accent: #2563eb;
  --background: #ffffff;
}
body { background: var(--background); font-family: system-ui, sans-serif; margin: 3rem auto; max-width: 40rem; }
h1 { color: var(--accent); }
`),
		".gitignore": []byte("node_modules\ndist\n.paddock\n"),
	}, nil
}

// NodeTemplateLock is the Vite template's package-lock.json: every package a new app
// installs, pinned with its integrity.
//
//go:embed templates/vite/package-lock.json
var NodeTemplateLock []byte

// templateLock is the template's lockfile for an app called name.
func templateLock(name string) ([]byte, error) {
	var lock map[string]any
	if err := json.Unmarshal(NodeTemplateLock, &lock); err != nil {
		return nil, fmt.Errorf("the template's lockfile: %w", err)
	}
	lock["name"] = name
	if root, ok := lock["packages"].(map[string]any)[""].(map[string]any); ok {
		root["name"] = name
	}
	b, err := json.MarshalIndent(lock, "", "  ")
	return append(b, '\n'), err
}

// viteTemplate pins the template's packages: a new app is the same app every time.
var viteTemplate = struct{ vite, pluginReact, react string }{vite: "5.4.21", pluginReact: "4.3.4", react: "18.3.1"}
