package provider

import (
	"context"
	"path"
	"strconv"

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
