package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/provider"
)

// appStep is POST /api/v1/sandboxes/{id}/app/{step}: a runtime provider's step, each of
// its commands run through the exec path (the sandbox's policy, capability and limits).
// A bad request or an unrecognised project is an error before the stream; after it, the
// step's progress and log are a text/event-stream ending with a result event.
func (s *Server) appStep(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	var req api.ProviderRequest
	if err := api.DecodeJSON(w, r, &req, 1<<16); err != nil {
		return err
	}
	run := execRunner{s: s, r: r, c: c}
	ws := provider.ShellWorkspace{Runner: run}
	plan, err := provider.Prepare(r.Context(), ws, req, r.PathValue("step"))
	if err != nil {
		return fmt.Errorf("%s in sandbox %s: %w", r.PathValue("step"), r.PathValue("id"), err)
	}
	// A step outlives the server's write timeout, as a stream does.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	sse := sseWriter{w: w}
	if err := plan.Run(r.Context(), run, ws, sse.emit); err != nil {
		s.log.Info("provider step failed", "sandbox", r.PathValue("id"), "step", r.PathValue("step"), "runtime", plan.Project.Runtime, "err", err)
	}
	return errResponded
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
		timeout = provider.DefaultTimeout
	}
	out, err := e.s.execute(e.r.WithContext(ctx), e.c, api.ExecRequest{
		Argv: cmd.Argv, Env: cmd.Env, Cwd: provider.Cwd(dir), Stdin: cmd.Stdin, TimeoutMS: timeout.Milliseconds(),
	})
	if err != nil {
		return provider.Result{}, err
	}
	return provider.Result{ExitCode: out.ExitCode, Stdout: out.Stdout, Stderr: out.Stderr, Error: out.Error}, nil
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
