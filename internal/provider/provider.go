// Package provider knows what a project is: a RuntimeProvider recognises a workspace's
// project (Detect) and says how to scaffold, resolve, build, validate, package and preview
// it, as commands. Run executes a step's commands inside a sandbox through a Runner (the
// control plane's exec path, under the sandbox's policy and limits) and reports typed
// progress and log events.
//
// A provider only describes commands and files; it never touches the host. Everything it
// asks for runs in the sandbox, as the sandbox user, so a hostile package.json or go.mod
// can do no more than any command the user could run there.
package provider

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// RuntimeProvider is one kind of project: its detection, its template and its steps.
type RuntimeProvider interface {
	// ID names the provider ("node").
	ID() string
	// Markers are the files Detect looks for, for the error when none is found.
	Markers() []string
	// Detect reports whether the project in dir is this provider's, and what it found.
	Detect(ctx context.Context, ws Workspace, dir string) (Project, bool, error)
	// Scaffold is the files of a new project called name.
	Scaffold(name string) (map[string][]byte, error)
	// Resolve fetches the project's dependencies.
	Resolve(p Project) []Command
	// Build compiles the project.
	Build(p Project) []Command
	// Validate runs its tests, lint and type checks.
	Validate(p Project) []Command
	// Package makes the project's deployable output and says where it is.
	Package(p Project) (cmds []Command, out string)
	// Preview is the dev server of the project, listening on port.
	Preview(p Project, port int) api.ProviderPreview
	// Cleanup lists what the steps leave behind, to remove (relative to the project).
	Cleanup(p Project) []string
	// Registries are the hosts the steps of project p fetch from, given the sandbox's
	// environment (a mirror named there, or in the project's own configuration, replaces
	// the public registry): while a step runs, the sandbox reaches these alone.
	Registries(ctx context.Context, ws Workspace, p Project, env []string) ([]string, error)
}

// Offliner is a provider whose tools can work from their caches alone. Offline is the
// environment that tells them to: a step whose registries the sandbox's policy refuses
// runs with it, so that what the cache holds installs and what it lacks fails at once,
// naming what was missing, instead of being retried against the refusal.
type Offliner interface {
	Offline() []string
}

// Project is a recognised project.
type Project struct {
	// Runtime is the provider's ID.
	Runtime string
	// Dir is the project's directory, relative to the workspace ("." for the workspace).
	Dir string
	// Scripts are the project's own named commands (package.json's scripts).
	Scripts map[string]string
	// Name is the project's own name where a step needs it (a cargo package's binary).
	Name string
}

// Command is one command of a step.
type Command struct {
	// Name labels the command in progress events ("npm install").
	Name string
	Argv []string
	Env  []string
	// Stdin is given to the command.
	Stdin []byte
	// Timeout bounds the command; zero means the step's (the request's timeout_seconds,
	// else api.DefaultStepTimeout): a cold dependency fetch or build takes longer than a
	// one-shot exec's default.
	Timeout time.Duration
}

// Providers are the built-in providers, in detection order: the most specific first,
// static last since any project may hold an index.html.
var Providers = []RuntimeProvider{Node{}, Go{}, Rust{}, Static{}}

// lookupEnv is the last value of key in env ("KEY=value" entries, as an exec's), the
// key matched without case when fold is set (npm reads NPM_CONFIG_REGISTRY too).
func lookupEnv(env []string, key string, fold bool) (string, bool) {
	val, found := "", false
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if ok && (k == key || fold && strings.EqualFold(k, key)) {
			val, found = v, true
		}
	}
	return val, found
}

// hostOf is the host of a registry's URL, lower-cased and without its port, or "" when
// raw names none.
func hostOf(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Hostname() == "" {
		return ""
	}
	return strings.ToLower(u.Hostname())
}

// addHost appends host to hosts unless it is empty or there already.
func addHost(hosts []string, host string) []string {
	if host == "" || slices.Contains(hosts, host) {
		return hosts
	}
	return append(hosts, host)
}

// Lookup is the provider called id.
func Lookup(id string) (RuntimeProvider, error) {
	var ids []string
	for _, p := range Providers {
		if p.ID() == id {
			return p, nil
		}
		ids = append(ids, p.ID())
	}
	return nil, fmt.Errorf("runtime %q: want one of %s: %w", id, strings.Join(ids, ", "), errdefs.ErrInvalidArgument)
}

// Detect finds the provider that recognises the project in dir. When none does, the
// error lists what was looked for.
func Detect(ctx context.Context, ws Workspace, dir string) (RuntimeProvider, Project, error) {
	for _, p := range Providers {
		proj, ok, err := p.Detect(ctx, ws, dir)
		if err != nil {
			return nil, Project{}, fmt.Errorf("%s project in %s: %w", p.ID(), dir, err)
		}
		if ok {
			return p, proj, nil
		}
	}
	return nil, Project{}, fmt.Errorf("no runtime recognises the project in %s: looked for %s: %w",
		displayDir(dir), lookedFor(), errdefs.ErrFailedPrecondition)
}

// lookedFor is every provider's markers, for an error saying no project was found.
func lookedFor() string {
	var looked []string
	for _, p := range Providers {
		looked = append(looked, fmt.Sprintf("%s (%s)", strings.Join(p.Markers(), " or "), p.ID()))
	}
	return strings.Join(looked, ", ")
}

// CleanDir checks a project directory given by a user: relative to the workspace and
// inside it.
func CleanDir(dir string) (string, error) {
	if dir == "" {
		return ".", nil
	}
	c := path.Clean(dir)
	if path.IsAbs(dir) || c == ".." || strings.HasPrefix(c, "../") || strings.ContainsAny(dir, "\x00\n") {
		return "", fmt.Errorf("dir %q: want a path inside the workspace, e.g. \"site\": %w", dir, errdefs.ErrInvalidArgument)
	}
	return c, nil
}

func displayDir(dir string) string {
	if dir == "." {
		return "the workspace"
	}
	return dir
}

// exists reports whether name is in the workspace.
func exists(ctx context.Context, ws Workspace, name string) (bool, error) {
	_, err := ws.ReadFile(ctx, name)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrNoFile):
		return false, nil
	}
	return false, err
}
