package provider

import (
	"context"
	"path"
	"strconv"
	"strings"

	"github.com/paddockhq/paddock/internal/api"
)

// Go is a Go module: go build, go vet and go test; its preview runs the binary as the app.
type Go struct{}

var _ RuntimeProvider = Go{}

func (Go) ID() string        { return "go" }
func (Go) Markers() []string { return []string{"go.mod"} }

func (g Go) Detect(ctx context.Context, ws Workspace, dir string) (Project, bool, error) {
	ok, err := exists(ctx, ws, path.Join(dir, "go.mod"))
	return Project{Runtime: g.ID(), Dir: dir}, ok, err
}

// goEnv keeps the toolchain the sandbox has: a go.mod asking for a newer one fails saying
// so rather than fetching one.
var goEnv = []string{"GOTOOLCHAIN=local", "CGO_ENABLED=0"}

func goCmd(args ...string) Command {
	name := "go " + args[0]
	if args[0] == "mod" {
		name += " " + args[1]
	}
	return Command{Name: name, Argv: append([]string{"go"}, args...), Env: goEnv}
}

func (Go) Resolve(Project) []Command { return []Command{goCmd("mod", "download")} }
func (Go) Build(Project) []Command   { return []Command{goCmd("build", "./...")} }
func (Go) Validate(Project) []Command {
	return []Command{goCmd("vet", "./..."), goCmd("test", "./...")}
}

// Package builds the main package into .paddock/out/app.
func (Go) Package(Project) ([]Command, string) {
	return []Command{goCmd("build", "-trimpath", "-o", ".paddock/out/app", ".")}, ".paddock/out"
}

// Preview builds the binary and runs it, listening on PORT. It does not reload by itself.
func (Go) Preview(p Project, port int) api.ProviderPreview {
	return api.ProviderPreview{
		Command: []string{"sh", "-c", "go build -o .paddock/bin/app . && exec .paddock/bin/app"},
		Dir:     p.Dir, Env: append([]string{"PORT=" + strconv.Itoa(port)}, goEnv...), Port: port, Ready: "/",
	}
}

func (Go) Cleanup(Project) []string { return []string{".paddock"} }

// Registries are the module proxies GOPROXY lists (proxy.golang.org by default) and the
// checksum database GOSUMDB names (sum.golang.org by default, none when off). GOPROXY's
// "direct" fetches from each module's own host, which a step does not reach.
func (Go) Registries(_ context.Context, _ Workspace, _ Project, env []string) ([]string, error) {
	var hosts []string
	proxy, ok := lookupEnv(env, "GOPROXY", false)
	if !ok {
		proxy = "https://proxy.golang.org,direct"
	}
	for _, p := range strings.FieldsFunc(proxy, func(r rune) bool { return r == ',' || r == '|' }) {
		hosts = addHost(hosts, hostOf(p))
	}
	sumdb, ok := lookupEnv(env, "GOSUMDB", false)
	if !ok {
		sumdb = "sum.golang.org"
	}
	// "NAME", "NAME+KEY" or "NAME+KEY URL": the URL's host when given, else the name's.
	if f := strings.Fields(sumdb); len(f) > 0 && f[0] != "off" {
		h := strings.ToLower(strings.SplitN(f[0], "+", 2)[0])
		if len(f) > 1 {
			h = hostOf(f[1])
		}
		hosts = addHost(hosts, h)
	}
	return hosts, nil
}

func (Go) Scaffold(name string) (map[string][]byte, error) {
	return map[string][]byte{
		"go.mod": []byte("module " + name + "\n\ngo 1.22\n"),
		"main.go": []byte(`// Command ` + name + ` serves its page on $PORT.
package main

import (
	"fmt"
	"log"
	"net/http"
	"os"
)

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, greeting()) })
	log.Fatal(http.ListenAndServe(":"+port, nil))
}

func greeting() string { return "hello from ` + name + `" }
`),
		"main_test.go": []byte(`package main

import "testing"

func TestGreeting(t *testing.T) {
	if greeting() == "" {
		t.Error("no greeting")
	}
}
`),
	}, nil
}
