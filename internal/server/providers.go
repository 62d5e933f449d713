package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/origins"
	"github.com/paddockhq/paddock/internal/provider"
	"github.com/paddockhq/paddock/internal/store"
)

// appStep is POST /api/v1/sandboxes/{id}/app/{step}: a runtime provider's step, each of
// its commands run through the exec path (the sandbox's policy, capability and limits).
// A bad request or an unrecognised project is an error before the stream; after it, the
// step's progress and log are a text/event-stream ending with a result event.
func (s *Server) appStep(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	if err := s.reachFirst(r, c); err != nil {
		return err
	}
	var req api.ProviderRequest
	if err := api.DecodeJSON(w, r, &req, 1<<16); err != nil {
		return err
	}
	step, id := r.PathValue("step"), r.PathValue("id")
	run := execRunner{s: s, r: r, c: c}
	ws := provider.ShellWorkspace{Runner: run}
	plan, err := provider.Prepare(r.Context(), ws, req, step)
	if err != nil {
		return fmt.Errorf("%s in sandbox %s: %w", step, id, err)
	}
	rec, err := s.fleet.Get(r.Context(), c, id)
	if err != nil {
		return err
	}
	registries, err := plan.Registries(r.Context(), ws, s.fleet.Env(rec))
	if err != nil {
		return fmt.Errorf("%s in sandbox %s: %w", step, id, err)
	}
	// One step at a time in a sandbox; while it runs, the sandbox reaches its provider's
	// registries alone (sandboxNetwork).
	if !s.steps.start(id, stepRun{step: step, runtime: plan.Project.Runtime, registries: registries}) {
		return fmt.Errorf("%s: another step is running in sandbox %s: wait for its end: %w", step, id, errdefs.ErrFailedPrecondition)
	}
	defer s.steps.done(id)
	// A step outlives the server's write timeout, as a stream does.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	sse := sseWriter{w: w}
	emit := sse.emit
	if refused := s.refusedRegistries(id, registries); len(refused) > 0 {
		note := fmt.Sprintf("the sandbox's policy refuses the %s provider's registries: %s", plan.Project.Runtime, strings.Join(refused, "; "))
		if plan.Offline() {
			note += "; its tools run offline, from their cache alone"
		}
		emit(api.ProviderEvent{Type: api.EventLog, Step: step, Stream: "paddock", Line: note})
		// A failure to fetch the dependencies says why in the step's error too.
		resolveFailed := false
		emit = func(ev api.ProviderEvent) {
			resolveFailed = resolveFailed || ev.Type == api.EventProgress && ev.State == "failed" && ev.Step == "resolve"
			if ev.Type == api.EventResult && ev.Error != "" && resolveFailed {
				ev.Error += " (" + note + ")"
			}
			sse.emit(ev)
		}
	}
	var checkpoint string
	plan.Atomic = func(ctx context.Context, emit func(api.ProviderEvent), run func() error) error {
		return s.atomically(r.WithContext(ctx), c, emit, &checkpoint, run)
	}
	plan.Collect = func(ctx context.Context, p provider.Project, archive string) (string, error) {
		return s.collectArtifact(ctx, run, p, archive, checkpoint)
	}
	plan.Serve = func(ctx context.Context, pv api.ProviderPreview) (string, error) {
		return s.servePreview(r.WithContext(ctx), c, plan.Project.Runtime, pv)
	}
	if s.fleet.HasTemplatePool(plan.Project.Runtime) {
		plan.FromPool = func(ctx context.Context, p provider.Project, scaffold []string) (bool, error) {
			return s.fromTemplatePool(ctx, c, r.PathValue("id"), p, scaffold)
		}
	}
	if err := plan.Run(r.Context(), run, ws, emit); err != nil {
		s.log.Info("provider step failed", "sandbox", r.PathValue("id"), "step", r.PathValue("step"), "runtime", plan.Project.Runtime, "err", err)
	}
	return errResponded
}

// refusedRegistries are those of registries the sandbox's network policy refuses, each
// with the rule and its reason.
func (s *Server) refusedRegistries(id string, registries []string) []string {
	var out []string
	none := s.netPolicy.Load() == nil
	for _, host := range registries {
		if none {
			out = append(out, host+" (rule network_policy: the server has none, so its sandboxes reach no network)")
		} else if d := (sandboxNetwork{s: s, id: id}).decide(host); !d.Allow {
			out = append(out, fmt.Sprintf("%s (rule %s: %s)", host, d.Rule, d.Reason))
		}
	}
	return out
}

// fromTemplatePool puts the resolved files of a member of p's runtime's template pool
// into project p of sandbox id: the member's tar stream goes, through the control plane,
// to a tar that extracts it in the sandbox, run as a streamed exec (its policy and
// limits). false when the pool has none ready.
func (s *Server) fromTemplatePool(ctx context.Context, c fleet.Caller, id string, p provider.Project, scaffold []string) (bool, error) {
	m := s.fleet.TakeTemplate(p.Runtime)
	if m == nil {
		return false, nil
	}
	hit := false
	defer func() { m.Done(hit) }()
	if why := s.poolRefusal(m.ID(), id); why != "" {
		return false, fmt.Errorf("%s: %w", why, errdefs.ErrPermissionDenied)
	}
	gate, err := s.ops.OpenStream(ctx, c, id)
	if err != nil {
		return false, err
	}
	sess, exit, err := gate.Start(ctx, api.StreamStart{Argv: []string{"tar", "-xf", "-"}, Cwd: p.Dir})
	if err != nil {
		return false, err
	}
	if exit != nil {
		return false, fmt.Errorf("tar did not start: exit %d %s: %w", exit.ExitCode, exit.Error, errdefs.ErrUnavailable)
	}
	defer sess.Close()
	type ended struct {
		exit   *api.StreamExit
		stderr []byte
		err    error
	}
	done := make(chan ended, 1)
	go func() {
		var e ended
		for {
			stream, data, exit, err := sess.Recv()
			switch {
			case err != nil, exit != nil:
				e.exit, e.err = exit, err
				done <- e
				return
			case stream == api.StreamStderr:
				e.stderr = tail(append(e.stderr, data...))
			}
		}
	}()
	if err := m.Export(ctx, scaffold, sess.Write); err != nil {
		sess.Kill()
		<-done
		return false, err
	}
	if err := sess.CloseInput(); err != nil {
		sess.Kill()
		<-done
		return false, err
	}
	e := <-done
	switch {
	case e.err != nil:
		return false, e.err
	case e.exit.ExitCode != 0 || e.exit.Error != "":
		return false, fmt.Errorf("tar: exit %d %s: %s: %w", e.exit.ExitCode, e.exit.Error, lastLines(string(e.stderr), 5), errdefs.ErrFailedPrecondition)
	}
	hit = true
	return true, nil
}

// execRunner runs a provider's commands as one-shot execs of the request's sandbox.
type execRunner struct {
	s *Server
	r *http.Request
	c fleet.Caller
}

func (e execRunner) Run(ctx context.Context, dir string, cmd provider.Command) (provider.Result, error) {
	timeout := cmd.Timeout
	if timeout == 0 {
		timeout = api.DefaultStepTimeout
	}
	// The agent takes a relative directory from the workspace, in every tier.
	out, err := e.s.ops.Exec(ctx, e.c, e.r.PathValue("id"), api.ExecRequest{
		Argv: cmd.Argv, Env: cmd.Env, Cwd: dir, Stdin: cmd.Stdin, TimeoutMS: timeout.Milliseconds(),
	})
	if err != nil {
		return provider.Result{}, err
	}
	return provider.Result{ExitCode: out.ExitCode, Stdout: out.Stdout, Stderr: out.Stderr, Error: out.Error, Limit: out.Limit}, nil
}

// maxTail is how much of a streamed command's output a Result keeps, for the error that
// quotes its last lines.
const maxTail = 64 << 10

// Stream runs a step's command as a streamed exec (the exec stream's path, under the same
// policy and limits), handing its output over as it comes.
func (e execRunner) Stream(ctx context.Context, dir string, cmd provider.Command, out func(stream string, data []byte)) (provider.Result, error) {
	timeout := cmd.Timeout
	if timeout == 0 {
		timeout = api.DefaultStepTimeout
	}
	gate, err := e.s.ops.OpenStream(ctx, e.c, e.r.PathValue("id"))
	if err != nil {
		return provider.Result{}, err
	}
	sess, exit, err := gate.Start(ctx, api.StreamStart{Argv: cmd.Argv, Env: cmd.Env, Cwd: dir})
	if err != nil {
		return provider.Result{}, err
	}
	if exit != nil {
		return provider.Result{ExitCode: exit.ExitCode, Error: exit.Error}, nil
	}
	defer sess.Close()
	_ = sess.CloseInput()
	var timedOut atomic.Bool
	kill := time.AfterFunc(timeout, func() { timedOut.Store(true); sess.Kill() })
	defer kill.Stop()
	var res provider.Result
	for {
		stream, data, exit, err := sess.Recv()
		switch {
		case err != nil:
			return provider.Result{}, err
		case exit != nil:
			res.ExitCode, res.Error, res.Limit = exit.ExitCode, exit.Error, exit.Limit
			if timedOut.Load() {
				res.Error, res.Limit = stepTimedOut(timeout), api.LimitTimeout
			} else if res.Error == "" && exit.Signal != 0 {
				res.Error = fmt.Sprintf("killed by signal %d", exit.Signal)
			}
			return res, nil
		case stream == api.StreamStderr:
			res.Stderr = tail(append(res.Stderr, data...))
			out("stderr", data)
		default:
			res.Stdout = tail(append(res.Stdout, data...))
			out("stdout", data)
		}
	}
}

// stepTimedOut says that a step's command was killed at its time limit, and how to give
// it a longer one.
func stepTimedOut(t time.Duration) string {
	msg := fmt.Sprintf("killed at the step's time limit (%s)", t)
	if t < api.MaxStepTimeout {
		msg += fmt.Sprintf(": give the step a longer one with timeout_seconds (paddock app --timeout), at most %s", api.MaxStepTimeout)
	}
	return msg
}

func tail(b []byte) []byte {
	if len(b) > maxTail {
		return b[len(b)-maxTail:]
	}
	return b
}

// sseWriter writes events as server-sent events, each flushed as it comes.
type sseWriter struct {
	w   http.ResponseWriter
	err error
}

func (s *sseWriter) emit(ev api.ProviderEvent) {
	if s.err != nil {
		return
	}
	b, err := json.Marshal(ev)
	if err != nil {
		slog.Error("provider event", "err", err)
		return
	}
	if _, s.err = fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", ev.Type, b); s.err == nil {
		s.err = http.NewResponseController(s.w).Flush()
	}
}

// setApp is PUT /api/v1/sandboxes/{id}/app: what the sandbox runs as its app (no command:
// the server's default), applied by restarting it.
func (s *Server) setApp(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	// Another user's sandbox is not found, whatever the body (a stopped one of the
	// caller's may have its app set).
	if _, err := s.fleet.Get(r.Context(), c, r.PathValue("id")); err != nil {
		return err
	}
	var t api.Template
	if err := api.DecodeJSON(w, r, &t, 1<<16); err != nil {
		return err
	}
	sb, err := s.fleet.SetApp(r.Context(), c, r.PathValue("id"), t)
	if err != nil {
		return err
	}
	return s.writeSandbox(w, r, http.StatusOK, sb)
}

// servePreview makes provider runtime's dev server the sandbox's app and says where it
// is served; an app that exits before it listens is an error with what it printed.
func (s *Server) servePreview(r *http.Request, c fleet.Caller, runtime string, pv api.ProviderPreview) (string, error) {
	id := r.PathValue("id")
	if _, err := s.serveApp(r.Context(), c, id, runtime, pv, "the dev server"); err != nil {
		return "", err
	}
	return s.origins.URL(origins.Host{Kind: origins.KindApp, ID: id}, r.Host), nil
}

// serveApp makes pv the sandbox's app, the dev server of provider runtime when runtime is
// not empty; one that exits before it listens is an error, naming what (what) with what
// it printed.
func (s *Server) serveApp(ctx context.Context, c fleet.Caller, id, runtime string, pv api.ProviderPreview, what string) (store.Sandbox, error) {
	argv := append(append([]string{"env"}, pv.Env...), pv.Command...)
	if len(pv.Env) == 0 {
		argv = pv.Command
	}
	sb, err := s.fleet.SetApp(ctx, c, id, api.Template{Command: argv, Port: pv.Port, Dir: pv.Dir, HotReload: pv.HotReload, Provider: runtime})
	if err != nil {
		return sb, err
	}
	st, err := s.ops.AppStatus(ctx, c, id)
	if err != nil {
		return sb, err
	}
	if st.State != "running" {
		return sb, fmt.Errorf("%s did not start (%s): %s: %w", what, st.State, lastLines(st.LastOutput, 5), errdefs.ErrFailedPrecondition)
	}
	return sb, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " / ")
}

// atomically runs a step as one workspace transaction: committed when it succeeds (one
// checkpoint for the step), rolled back when it fails, so the workspace is as before. A
// transaction already open (the user's own, or a step's the control plane did not finish)
// refuses the step, saying which.
func (s *Server) atomically(r *http.Request, c fleet.Caller, emit func(api.ProviderEvent), base *string, run func() error) error {
	step, id := r.PathValue("step"), r.PathValue("id")
	tx, err := s.ops.Begin(r.Context(), c, id, api.BeginRequest{Message: stepMessage + step})
	if errors.Is(err, errdefs.ErrFailedPrecondition) {
		if left, aerr := s.abandonedStep(r.Context(), c, id); aerr == nil && left != nil {
			if _, rerr := s.ops.Rollback(r.Context(), c, id); rerr != nil {
				return fmt.Errorf("%s: %w; rolling back the step left open failed: %v", step, err, rerr)
			}
			emit(api.ProviderEvent{Type: api.EventLog, Step: step, Stream: "paddock", Line: describeAbandoned(left)})
			tx, err = s.ops.Begin(r.Context(), c, id, api.BeginRequest{Message: stepMessage + step})
		}
	}
	if err != nil {
		if !errors.Is(err, errdefs.ErrUnavailable) {
			return fmt.Errorf("%s: %w", step, err)
		}
		// No history (a process-tier sandbox): the step runs, not atomically.
		emit(api.ProviderEvent{Type: api.EventLog, Step: step, Stream: "paddock", Line: "not atomic: " + err.Error()})
		return run()
	}
	*base = tx.Base
	if err := run(); err != nil {
		ctx := context.WithoutCancel(r.Context())
		if _, rerr := s.ops.Rollback(ctx, c, id); rerr != nil {
			return fmt.Errorf("%w; rolling the workspace back failed too: %v", err, rerr)
		}
		emit(api.ProviderEvent{Type: api.EventLog, Step: step, Stream: "paddock", Line: "the workspace is as it was before " + step})
		return err
	}
	if _, err := s.ops.Commit(r.Context(), c, id); err != nil {
		return fmt.Errorf("%s: commit: %w", step, err)
	}
	return nil
}
