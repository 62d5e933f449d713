package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// PreviewPort is where a preview's dev server listens: the sandbox's app port.
const PreviewPort = 8080

// Plan is a step ready to run: the project it is about and its phases in order.
type Plan struct {
	Project  Project
	provider RuntimeProvider
	step     string
	files    map[string][]byte
	phases   []phase
	artifact string
	// timeout bounds each command that sets none of its own.
	timeout time.Duration
	// env is added to every command's environment (Offline).
	env []string
	// Atomic, when set, runs a step that changes the workspace (new, build, validate,
	// package) as one transaction: run's failure leaves the workspace as it was before.
	Atomic func(ctx context.Context, emit func(api.ProviderEvent), run func() error) error
	// Serve, for a preview, makes the dev server the sandbox's app and returns its URL;
	// nil only reports it.
	Serve func(ctx context.Context, pv api.ProviderPreview) (string, error)
	// Collect, for a package, stores the archive made (relative to the workspace) and
	// returns the stored artifact's ID. It runs inside the step, so that its failure fails
	// the step.
	Collect   func(ctx context.Context, p Project, archive string) (string, error)
	collected string
	// FromPool, for a new project, puts the template's resolved dependencies into the
	// project (from a warm pool) in place of the resolve phase, after the scaffold is
	// written; scaffold names its files, which it must leave. false means it had none, and
	// an error that it failed: either way the resolve phase runs.
	FromPool func(ctx context.Context, p Project, scaffold []string) (bool, error)
}

type phase struct {
	name string
	cmds []Command
}

// atomicSteps are the steps run as one workspace transaction when the Plan can.
var atomicSteps = []string{api.StepNew, api.StepBuild, api.StepValidate, api.StepPackage}

var steps = []string{api.StepNew, api.StepBuild, api.StepValidate, api.StepPackage, api.StepPreview, api.StepClean}

// Prepare checks a request and finds its project, before anything runs: a bad runtime or
// directory, a project that exists already ("new") or none recognised is an error here.
func Prepare(ctx context.Context, ws Workspace, req api.ProviderRequest, step string) (*Plan, error) {
	if !slices.Contains(steps, step) {
		return nil, fmt.Errorf("step %q: want %s: %w", step, strings.Join(steps, ", "), errdefs.ErrInvalidArgument)
	}
	dir, err := CleanDir(req.Dir)
	if err != nil {
		return nil, err
	}
	timeout, err := stepTimeout(req.TimeoutSeconds)
	if err != nil {
		return nil, err
	}
	if step == api.StepNew {
		pl, err := prepareNew(ctx, ws, req, dir)
		if err != nil {
			return nil, err
		}
		pl.timeout = timeout
		return pl, nil
	}
	if req.Name != "" {
		return nil, fmt.Errorf("name: only a new project is named: %w", errdefs.ErrInvalidArgument)
	}
	var p RuntimeProvider
	var proj Project
	if req.Runtime != "" {
		if p, err = Lookup(req.Runtime); err != nil {
			return nil, err
		}
		var ok bool
		if proj, ok, err = p.Detect(ctx, ws, dir); err != nil {
			return nil, err
		} else if !ok {
			return nil, fmt.Errorf("no %s project in %s: looked for %s: %w", p.ID(), displayDir(dir), strings.Join(p.Markers(), " or "), errdefs.ErrFailedPrecondition)
		}
	} else if p, proj, err = Detect(ctx, ws, dir); err != nil {
		if req.Dir != "" || !errors.Is(err, errdefs.ErrFailedPrecondition) {
			return nil, err
		}
		// No project in the workspace itself: the one directory that holds one is it, as
		// after "app new NAME".
		if dir, err = onlyProject(ctx, ws, err); err != nil {
			return nil, err
		}
		if p, proj, err = Detect(ctx, ws, dir); err != nil {
			return nil, err
		}
	}
	pl := &Plan{Project: proj, provider: p, step: step, timeout: timeout}
	switch step {
	case api.StepBuild:
		pl.add("resolve", p.Resolve(proj)).add("build", p.Build(proj))
	case api.StepValidate:
		pl.add("resolve", p.Resolve(proj)).add("validate", p.Validate(proj))
	case api.StepPackage:
		// A project that fails its validation is not packaged.
		cmds, out := p.Package(proj)
		pl.artifact = path.Join(dir, ".paddock", "package", p.ID()+".tar.gz")
		pl.add("resolve", p.Resolve(proj)).add("validate", p.Validate(proj)).add("package", append(cmds, archive(out, pl.artifact, dir)))
	case api.StepPreview:
		pl.add("resolve", p.Resolve(proj))
	case api.StepClean:
		paths := p.Cleanup(proj)
		pl.add("clean", []Command{{Name: "remove " + strings.Join(paths, " "), Argv: append([]string{"rm", "-rf", "--"}, paths...)}})
	}
	return pl, nil
}

// stepTimeout is the bound on each command of a step that asks for secs seconds.
func stepTimeout(secs int) (time.Duration, error) {
	t := time.Duration(secs) * time.Second
	switch {
	case secs < 0 || t > api.MaxStepTimeout:
		return 0, fmt.Errorf("timeout_seconds: %d is not between 0 and %d: %w", secs, int(api.MaxStepTimeout.Seconds()), errdefs.ErrInvalidArgument)
	case secs == 0:
		return api.DefaultStepTimeout, nil
	}
	return t, nil
}

// projectFinder is a Workspace that can list its top-level project directories.
type projectFinder interface {
	Projects(ctx context.Context, markers []string) ([]string, error)
}

// onlyProject is the workspace's one top-level directory that holds a project. With none,
// or several, it is notFound, naming those it found.
func onlyProject(ctx context.Context, ws Workspace, notFound error) (string, error) {
	f, ok := ws.(projectFinder)
	if !ok {
		return "", notFound
	}
	var markers []string
	for _, p := range Providers {
		markers = append(markers, p.Markers()...)
	}
	dirs, err := f.Projects(ctx, markers)
	switch {
	case err != nil:
		return "", errors.Join(notFound, err)
	case len(dirs) == 1:
		return dirs[0], nil
	case len(dirs) > 1:
		return "", fmt.Errorf("no runtime recognises the project in the workspace: looked for %s; these directories hold projects: %s: give one as the dir (--dir): %w",
			lookedFor(), strings.Join(dirs, ", "), errdefs.ErrFailedPrecondition)
	}
	return "", notFound
}

func prepareNew(ctx context.Context, ws Workspace, req api.ProviderRequest, dir string) (*Plan, error) {
	if req.Runtime == "" {
		return nil, fmt.Errorf("runtime: give the new project's runtime, e.g. \"node\": %w", errdefs.ErrInvalidArgument)
	}
	p, err := Lookup(req.Runtime)
	if err != nil {
		return nil, err
	}
	name := req.Name
	if name == "" {
		name = path.Base(dir)
	}
	if !validName(name) {
		return nil, fmt.Errorf("name %q: want lower-case letters, digits and dashes, e.g. \"my-site\": %w", name, errdefs.ErrInvalidArgument)
	}
	if _, ok, err := p.Detect(ctx, ws, dir); err != nil {
		return nil, err
	} else if ok {
		return nil, fmt.Errorf("%s holds a %s project already: %w", displayDir(dir), p.ID(), errdefs.ErrAlreadyExists)
	}
	files, err := p.Scaffold(name)
	if err != nil {
		return nil, err
	}
	proj := Project{Runtime: p.ID(), Dir: dir}
	pl := &Plan{Project: proj, provider: p, step: api.StepNew, files: files}
	pl.add("resolve", p.Resolve(proj))
	return pl, nil
}

func validName(s string) bool {
	if s == "" || len(s) > 64 || s[0] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

func (pl *Plan) add(name string, cmds []Command) *Plan {
	pl.phases = append(pl.phases, phase{name, cmds})
	return pl
}

// archive packs out (relative to the project) into artifact (relative to the workspace).
func archive(out, artifact, dir string) Command {
	rel := strings.TrimPrefix(artifact, dir+"/")
	if dir == "." {
		rel = artifact
	}
	return Command{Name: "archive " + out, Argv: []string{"sh", "-c",
		`mkdir -p "$(dirname "$2")" && tar --exclude=./.paddock -czf "$2" -C "$1" .`, "sh", out, rel}}
}

// Offline makes the plan's commands work from their caches alone, where its provider can
// (Offliner); false when it cannot.
func (pl *Plan) Offline() bool {
	o, ok := pl.provider.(Offliner)
	if ok {
		pl.env = append(pl.env, o.Offline()...)
	}
	return ok
}

// Registries are the hosts the plan's project fetches from, given the sandbox's
// environment.
func (pl *Plan) Registries(ctx context.Context, ws Workspace, env []string) ([]string, error) {
	return pl.provider.Registries(ctx, ws, pl.Project, env)
}

// Run runs the plan's phases in the sandbox, emitting progress and log events, and ends
// with a result event (with the error, if one failed).
func (pl *Plan) Run(ctx context.Context, r Runner, ws Workspace, emit func(api.ProviderEvent)) error {
	run := func() error { return pl.run(ctx, r, ws, emit) }
	var err error
	if pl.Atomic != nil && slices.Contains(atomicSteps, pl.step) {
		err = pl.Atomic(ctx, emit, run)
	} else {
		err = run()
	}
	res := api.ProviderEvent{Type: api.EventResult, Step: pl.step, Runtime: pl.Project.Runtime, Dir: pl.Project.Dir}
	if err == nil && pl.step == api.StepPreview {
		pv := pl.provider.Preview(pl.Project, PreviewPort)
		res.Preview = &pv
		res.URL, err = pl.serve(ctx, pv, emit)
	}
	if err != nil {
		res.Error, res.Preview = err.Error(), nil
		var le limitError
		if errors.As(err, &le) {
			res.Limit = le.limit
		}
	} else {
		res.Artifact, res.ArtifactID = pl.artifact, pl.collected
	}
	emit(res)
	return err
}

func (pl *Plan) serve(ctx context.Context, pv api.ProviderPreview, emit func(api.ProviderEvent)) (string, error) {
	if pl.Serve == nil {
		return "", nil
	}
	ev := api.ProviderEvent{Type: api.EventProgress, Step: "serve", Command: strings.Join(pv.Command, " "), Index: 1, Total: 1, State: "running"}
	emit(ev)
	url, err := pl.Serve(ctx, pv)
	if err != nil {
		ev.State, ev.Error = "failed", err.Error()
		emit(ev)
		return "", fmt.Errorf("serve: %w", err)
	}
	ev.State = "ok"
	emit(ev)
	return url, nil
}

func (pl *Plan) run(ctx context.Context, r Runner, ws Workspace, emit func(api.ProviderEvent)) error {
	if err := pl.scaffold(ctx, ws, emit); err != nil {
		return err
	}
	pooled := pl.fromPool(ctx, emit)
	for _, ph := range pl.phases {
		if pooled && ph.name == "resolve" {
			continue
		}
		if len(ph.cmds) == 0 {
			emit(api.ProviderEvent{Type: api.EventLog, Step: ph.name, Stream: "paddock", Line: "nothing to " + ph.name + " for a " + pl.Project.Runtime + " project"})
		}
		for i, c := range ph.cmds {
			if c.Timeout == 0 {
				c.Timeout = pl.timeout
			}
			if len(pl.env) > 0 {
				c.Env = append(slices.Clone(c.Env), pl.env...)
			}
			if err := runOne(ctx, r, pl.Project.Dir, ph.name, i+1, len(ph.cmds), c, emit); err != nil {
				return err
			}
		}
	}
	if pl.step == api.StepPackage && pl.Collect != nil {
		return pl.collect(ctx, emit)
	}
	return nil
}

// fromPool runs FromPool for a new project, and reports whether it resolved it.
func (pl *Plan) fromPool(ctx context.Context, emit func(api.ProviderEvent)) bool {
	if pl.step != api.StepNew || pl.FromPool == nil {
		return false
	}
	names := slices.Sorted(maps.Keys(pl.files))
	ev := api.ProviderEvent{Type: api.EventProgress, Step: "resolve", Command: "from the warm pool", Index: 1, Total: 1, State: "running"}
	emit(ev)
	ok, err := pl.FromPool(ctx, pl.Project, names)
	switch {
	case err != nil:
		ev.State, ev.Error = "failed", err.Error()
		emit(ev)
		emit(api.ProviderEvent{Type: api.EventLog, Step: "resolve", Stream: "paddock", Line: "the warm pool's dependencies could not be taken; resolving them here"})
		return false
	case !ok:
		ev.State = "ok"
		emit(ev)
		emit(api.ProviderEvent{Type: api.EventLog, Step: "resolve", Stream: "paddock", Line: "the warm pool has no " + pl.Project.Runtime + " template ready; resolving here"})
		return false
	}
	ev.State = "ok"
	emit(ev)
	emit(api.ProviderEvent{Type: api.EventLog, Step: "resolve", Stream: "paddock", Line: "dependencies taken from the warm pool's " + pl.Project.Runtime + " template"})
	return true
}

func (pl *Plan) collect(ctx context.Context, emit func(api.ProviderEvent)) error {
	ev := api.ProviderEvent{Type: api.EventProgress, Step: "store", Command: "store " + pl.artifact, Index: 1, Total: 1, State: "running"}
	emit(ev)
	id, err := pl.Collect(ctx, pl.Project, pl.artifact)
	if err != nil {
		ev.State, ev.Error = "failed", err.Error()
		emit(ev)
		return fmt.Errorf("store the artifact: %w", err)
	}
	pl.collected = id
	ev.State = "ok"
	emit(ev)
	emit(api.ProviderEvent{Type: api.EventLog, Step: "store", Stream: "paddock", Line: "artifact " + id})
	return nil
}

func (pl *Plan) scaffold(ctx context.Context, ws Workspace, emit func(api.ProviderEvent)) error {
	names := make([]string, 0, len(pl.files))
	for n := range pl.files {
		names = append(names, n)
	}
	sort.Strings(names)
	for i, n := range names {
		ev := api.ProviderEvent{Type: api.EventProgress, Step: "scaffold", Command: "write " + n, Index: i + 1, Total: len(names), State: "running"}
		emit(ev)
		if err := ws.WriteFile(ctx, path.Join(pl.Project.Dir, n), pl.files[n]); err != nil {
			ev.State, ev.Error = "failed", err.Error()
			emit(ev)
			return fmt.Errorf("scaffold: %w", err)
		}
		ev.State = "ok"
		emit(ev)
	}
	return nil
}

func runOne(ctx context.Context, r Runner, dir, step string, i, n int, c Command, emit func(api.ProviderEvent)) error {
	ev := api.ProviderEvent{Type: api.EventProgress, Step: step, Command: c.Name, Index: i, Total: n, State: "running"}
	emit(ev)
	var res Result
	var err error
	if s, ok := r.(Streamer); ok && c.Stdin == nil {
		lines := map[string]*lineEmitter{}
		res, err = s.Stream(ctx, dir, c, func(stream string, data []byte) {
			if lines[stream] == nil {
				lines[stream] = &lineEmitter{step: step, cmd: c.Name, stream: stream, emit: emit}
			}
			lines[stream].write(data)
		})
		for _, l := range lines {
			l.flush()
		}
	} else if res, err = r.Run(ctx, dir, c); err == nil {
		emitLines(step, c.Name, "stdout", res.Stdout, emit)
		emitLines(step, c.Name, "stderr", res.Stderr, emit)
	}
	if err == nil {
		if res.ExitCode != 0 || res.Error != "" {
			err = fmt.Errorf("%s: %s: %w", c.Name, failure(res), errdefs.ErrFailedPrecondition)
			if res.Limit != "" {
				err = limitError{limit: res.Limit, err: err}
			}
		}
	}
	if err != nil {
		ev.State, ev.Error, ev.Limit = "failed", err.Error(), res.Limit
		emit(ev)
		if errors.Is(err, errdefs.ErrFailedPrecondition) {
			return fmt.Errorf("%s failed: %w", step, err)
		}
		return fmt.Errorf("%s: %w", step, err)
	}
	ev.State = "ok"
	emit(ev)
	return nil
}

// limitError is a command's failure at a limit of the sandbox or the step: the step's
// result names the limit.
type limitError struct {
	limit string
	err   error
}

func (e limitError) Error() string { return e.err.Error() }
func (e limitError) Unwrap() error { return e.err }

func emitLines(step, cmd, stream string, b []byte, emit func(api.ProviderEvent)) {
	s := strings.ToValidUTF8(strings.TrimRight(string(b), "\n"), "\uFFFD")
	if s == "" {
		return
	}
	for _, line := range strings.Split(s, "\n") {
		emit(api.ProviderEvent{Type: api.EventLog, Step: step, Command: cmd, Stream: stream, Line: strings.TrimSuffix(line, "\r")})
	}
}

// maxLogLine bounds a log line held back for its newline.
const maxLogLine = 64 << 10

// lineEmitter turns a stream's output into log events, a line each, as lines complete.
type lineEmitter struct {
	step, cmd, stream string
	emit              func(api.ProviderEvent)
	buf               []byte
}

func (l *lineEmitter) write(data []byte) {
	l.buf = append(l.buf, data...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.line(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > maxLogLine {
		l.flush()
	}
}

func (l *lineEmitter) flush() {
	if len(l.buf) > 0 {
		l.line(l.buf)
		l.buf = nil
	}
}

func (l *lineEmitter) line(b []byte) {
	s := strings.TrimSuffix(strings.ToValidUTF8(string(b), "\uFFFD"), "\r")
	l.emit(api.ProviderEvent{Type: api.EventLog, Step: l.step, Command: l.cmd, Stream: l.stream, Line: s})
}
