package sandboxops

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/policy"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/agentclient"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
	"github.com/paddockhq/paddock/internal/wire/channel"
)

// Bounds of a one-shot exec.
const (
	defaultExecTimeout = 60 * time.Second
	maxExecTimeout     = 10 * time.Minute
	defaultExecOutput  = 1 << 20
	maxExecOutput      = channel.MaxExecuteOutput
)

// Exec runs a command in sandbox id to its end and returns what it wrote and how it
// ended, with the limit it met.
func (o *Ops) Exec(ctx context.Context, c fleet.Caller, id string, req api.ExecRequest) (api.ExecResult, error) {
	if err := CheckCommand(req.Argv, req.Env); err != nil {
		return api.ExecResult{}, err
	}
	timeout, output := time.Duration(req.TimeoutMS)*time.Millisecond, req.MaxOutputBytes
	switch {
	case req.TimeoutMS < 0 || timeout > maxExecTimeout:
		return api.ExecResult{}, fmt.Errorf("timeout_ms: %d is not between 0 and %d: %w", req.TimeoutMS, maxExecTimeout.Milliseconds(), errdefs.ErrInvalidArgument)
	case output < 0 || output > maxExecOutput:
		return api.ExecResult{}, fmt.Errorf("max_output_bytes: %d is not between 0 and %d: %w", output, maxExecOutput, errdefs.ErrInvalidArgument)
	}
	if timeout == 0 {
		timeout = defaultExecTimeout
	}
	if output == 0 {
		output = defaultExecOutput
	}
	sb, err := o.fleet.Handle(ctx, c, id)
	if err != nil {
		return api.ExecResult{}, err
	}
	in, err := o.policyOf(ctx, c, id)
	if err != nil {
		return api.ExecResult{}, err
	}
	var d policy.Decision
	if in.pol != nil {
		if d = in.exec(req.Argv, req.Env, req.Stdin); !d.Allow {
			o.audit(ctx, c, "sandbox.exec_denied", id, req.Argv, in, d, req.Env)
			return api.ExecResult{}, in.denied(d)
		}
	}
	if err := o.capabilityEnv(ctx, c, id, req.Argv, req.Env); err != nil {
		return api.ExecResult{}, err
	}
	capTok, err := o.capabilityExec(ctx, req.Argv, req.Env)
	if err != nil {
		return api.ExecResult{}, err
	}
	o.audit(ctx, c, "sandbox.exec", id, req.Argv, in, d, nil)
	timeoutBy := "the exec's timeout"
	if t := in.timeout(); t > 0 && t <= timeout {
		timeout, timeoutBy = t, "the policy's timeout"
	}
	// The agent enforces the timeout; the RPC gets a little longer to report it.
	ctx, cancel := context.WithTimeout(ctx, timeout+5*time.Second)
	defer cancel()
	before := countLimits(sb)
	res, err := sb.Agent().Execute(ctx, &pb.ExecuteRequest{
		Argv: req.Argv, Env: req.Env, AddEnv: true, Cwd: req.Cwd, Stdin: req.Stdin,
		TimeoutMs: uint64(timeout.Milliseconds()), MaxOutputBytes: uint64(output), Capability: capTok, Gate: in.gate(),
	})
	if err != nil {
		return api.ExecResult{}, fmt.Errorf("exec in sandbox %s: %w", id, o.fromAgent(ctx, c, id, "sandbox.exec_denied", map[string]any{"program": req.Argv[0]}, err))
	}
	st := res.GetStatus()
	out := api.ExecResult{
		ExitCode: int(st.GetExitCode()), Signal: int(st.GetSignal()), Error: st.GetError(),
		Stdout: nonNil(res.Stdout), Stderr: nonNil(res.Stderr),
		StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated, TimedOut: res.TimedOut,
	}
	end := commandEnd{signal: out.Signal, timedOut: out.TimedOut, timeout: fmt.Sprintf("%s (%s)", timeoutBy, timeout)}
	var msg string
	out.Limit, msg = limitHit(end, before, countLimits(sb), sb.Limits)
	out.Error = cmp.Or(out.Error, msg)
	return out, nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// CheckCommand refuses a command line that cannot be run: no program, or an environment
// entry that is not NAME=VALUE.
func CheckCommand(argv, env []string) error {
	if len(argv) == 0 || argv[0] == "" {
		return fmt.Errorf("argv: give the command to run, e.g. [\"ls\", \"-l\"]: %w", errdefs.ErrInvalidArgument)
	}
	for i, kv := range env {
		if !wire.ValidEnvEntry(kv) {
			return fmt.Errorf("env: entry %d: want NAME=VALUE: %w", i, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// fromAgent is the agent's error for a request of sandbox id (already in the taxonomy);
// a refusal the agent made itself (a capability token, or the policy's file rules where
// the path really leads) is recorded as action, with the operation and the path, like
// the control plane's own refusals.
func (o *Ops) fromAgent(ctx context.Context, c fleet.Caller, id, action string, detail map[string]any, err error) error {
	if errors.Is(err, errdefs.ErrPermissionDenied) {
		detail["sandbox"], detail["by"], detail["error"] = id, "agent", err.Error()
		o.event(ctx, c.UserID, action, detail)
	}
	return err
}

// StreamGate is an interactive command's way into a sandbox the caller may reach, settled
// before the command is known (the front door may have to answer first, as a WebSocket
// upgrade does).
type StreamGate struct {
	o  *Ops
	c  fleet.Caller
	id string
	sb *runner.Sandbox
	in InForce
}

// OpenStream reaches sandbox id for an interactive command: another user's is not found.
func (o *Ops) OpenStream(ctx context.Context, c fleet.Caller, id string) (*StreamGate, error) {
	sb, err := o.fleet.Handle(ctx, c, id)
	if err != nil {
		return nil, err
	}
	in, err := o.policyOf(ctx, c, id)
	if err != nil {
		return nil, err
	}
	return &StreamGate{o: o, c: c, id: id, sb: sb, in: in}, nil
}

// Start decides start under the policy and the capability in force and starts it. A
// refusal is err, and nothing reached the sandbox; a command that ended at once (it could
// not start, or exited) is exit; otherwise the session runs until Recv returns its exit.
func (g *StreamGate) Start(ctx context.Context, start api.StreamStart) (sess *Session, exit *api.StreamExit, err error) {
	o, c, id, in := g.o, g.c, g.id, g.in
	if err := CheckCommand(start.Argv, start.Env); err != nil {
		return nil, nil, err
	}
	var d policy.Decision
	if in.pol != nil {
		if d = in.stream(start.Argv, start.Env); !d.Allow {
			o.audit(ctx, c, "sandbox.exec_stream_denied", id, start.Argv, in, d, start.Env)
			return nil, nil, in.denied(d)
		}
	}
	if err := o.capabilityEnv(ctx, c, id, start.Argv, start.Env); err != nil {
		return nil, nil, err
	}
	capTok, err := o.capabilityExec(ctx, start.Argv, start.Env)
	if err != nil {
		return nil, nil, err
	}
	o.audit(ctx, c, "sandbox.exec_stream", id, start.Argv, in, d, nil)
	req := &pb.StartRequest{Argv: start.Argv, Env: start.Env, AddEnv: true, Cwd: start.Cwd, Capability: capTok, Gate: in.gate()}
	if start.TTY != nil {
		req.Tty = &pb.TTYSize{Rows: start.TTY.Rows, Cols: start.TTY.Cols}
	}
	if start.Keep && start.TTY == nil {
		return nil, nil, fmt.Errorf("keep: only a terminal (tty) session is kept: %w", errdefs.ErrInvalidArgument)
	}
	if start.Keep {
		req.SessionId = keptPrefix + rand.Text()[:16]
	}
	s := &Session{o: o, sandboxID: id, agent: g.sb.Agent(), sb: g.sb, in: in, before: countLimits(g.sb), kept: start.Keep}
	s.ctx, s.cancel = context.WithCancel(ctx)
	events, err := s.agent.Start(s.ctx, req)
	if err == nil {
		var first *pb.ProcessEvent
		if first, err = events.Recv(); err == nil {
			s.id, s.events = first.GetStarted().GetSessionId(), events
			if ex := first.GetExited(); ex != nil {
				x := s.exit(ex)
				s.Close()
				return nil, &x, nil
			}
		}
	}
	if err != nil {
		s.Close()
		return nil, &api.StreamExit{Type: "exit", ExitCode: 127, Error: err.Error()}, nil
	}
	if t := in.timeout(); t > 0 {
		// The policy's wall-clock limit: the session is killed, and ends as killed.
		s.kill = time.AfterFunc(t, func() {
			s.timedOut.Store(true)
			s.Kill()
		})
	}
	if s.kept {
		o.kept.Store(keptKey(id, s.id), &keptSession{agent: s.agent})
	}
	return s, nil, nil
}

// keptSession is a kept session's entry: the agent it runs under (a restarted sandbox has
// another, whose sessions reuse the IDs), and while no client is attached, the timer that
// kills it.
type keptSession struct {
	agent *agentclient.Client
	idle  *time.Timer
	// ended: the session exited (its exit was delivered); the entry goes after keptIdle.
	ended bool
}

// Attach reattaches to a kept session of the sandbox (StreamStart.Attach), replaying its
// output from start.Offset. Only a session started with keep can be attached to, and not
// under a capability token: a token limits what its holder runs, and a kept shell is its
// owner's. A session that is gone is an exit that says so.
func (g *StreamGate) Attach(ctx context.Context, start api.StreamStart) (sess *Session, exit *api.StreamExit, err error) {
	o, id := g.o, g.id
	if heldCapabilityOf(ctx) != nil {
		return nil, nil, fmt.Errorf("attach: a capability token cannot attach to a terminal session: %w", errdefs.ErrPermissionDenied)
	}
	key := keptKey(id, start.Attach)
	var entry *keptSession
	if v, ok := o.kept.Load(key); ok {
		entry = v.(*keptSession)
		if entry.agent != g.sb.Agent() {
			o.kept.CompareAndDelete(key, v) // the sandbox restarted since: that session is gone
			entry = nil
		}
	}
	gone := &api.StreamExit{Type: "exit", ExitCode: 127, Error: fmt.Sprintf("attach: no kept session %s in this sandbox (it ended, or was not started with keep)", errdefs.Clip(start.Attach, 64))}
	if entry != nil && entry.ended {
		return nil, gone, nil
	}
	// Not in the registry but named as only kept sessions are: one kept before this
	// process started (a restart of the control plane), if the sandbox's agent still runs it.
	adopt := entry == nil && strings.HasPrefix(start.Attach, keptPrefix)
	if entry == nil && !adopt {
		return nil, gone, nil
	}
	if entry != nil && entry.idle != nil {
		entry.idle.Stop()
	}
	o.kept.Store(key, &keptSession{agent: g.sb.Agent()})
	o.event(ctx, g.c.UserID, "sandbox.exec_attach", map[string]any{"sandbox": id, "session": start.Attach})
	s := &Session{o: o, sandboxID: id, agent: g.sb.Agent(), sb: g.sb, in: g.in, before: countLimits(g.sb), kept: true, id: start.Attach}
	s.ctx, s.cancel = context.WithCancel(ctx)
	if s.events, err = s.agent.Attach(s.ctx, start.Attach, start.Offset); err != nil {
		s.Leave()
		s.Close()
		return nil, &api.StreamExit{Type: "exit", ExitCode: 127, Error: err.Error()}, nil
	}
	if adopt {
		// The agent answers an attach with Started, or with the error that it has no such session.
		if _, err := s.events.Recv(); err != nil {
			o.kept.Delete(key)
			s.Close()
			if errors.Is(err, errdefs.ErrNotFound) {
				return nil, gone, nil
			}
			return nil, &api.StreamExit{Type: "exit", ExitCode: 127, Error: err.Error()}, nil
		}
	}
	if start.TTY != nil {
		_ = s.Resize(start.TTY.Rows, start.TTY.Cols)
	}
	return s, nil, nil
}

func keptKey(sandboxID, session string) string { return sandboxID + "/" + session }

// keptPrefix begins the ID of every session started with keep. The control plane names
// those sessions (the API cannot name any), so that a client reattaching after a restart
// of the control plane, which lost the registry with its memory, still finds its shell.
const keptPrefix = "kept-"

// keptIdle is how long a kept session runs with no client (api.KeptIdle).
var keptIdle = api.KeptIdle

// Leave is the client going away: a kept session runs on for keptIdle, for a client to
// reattach; any other is killed, as a closed terminal would hang it up.
func (s *Session) Leave() {
	if !s.kept {
		s.Kill()
		return
	}
	key, agent, id := keptKey(s.sandboxID, s.id), s.agent, s.id
	o := s.o
	entry := &keptSession{agent: agent}
	entry.idle = time.AfterFunc(keptIdle, func() {
		// Only if no client attached since: an attach replaces the entry.
		if o.kept.CompareAndDelete(key, entry) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = agent.Signal(ctx, id, 9)
		}
	})
	if old, loaded := o.kept.Swap(key, entry); loaded && old.(*keptSession).idle != nil {
		old.(*keptSession).idle.Stop()
	}
}

// ID is the session's ID in the sandbox.
func (s *Session) ID() string { return s.id }

// Kept says whether the session outlives its client (StreamStart.Keep, or an attach).
func (s *Session) Kept() bool { return s.kept }

// Session is an interactive command running in a sandbox. Recv is for one goroutine, the
// input methods for another.
type Session struct {
	o         *Ops
	sandboxID string
	kept      bool
	agent     *agentclient.Client
	sb        *runner.Sandbox
	in        InForce
	before    limitCounts
	id        string
	events    *agentclient.Stream[pb.ProcessEvent]
	ctx       context.Context
	cancel    context.CancelFunc
	kill      *time.Timer
	timedOut  atomic.Bool
}

// Recv is the session's next output (stream api.StreamStdout or api.StreamStderr, and
// data), or its exit, which ends it. An error means the stream broke before an exit:
// the caller went away or the sandbox did; the session is then killed.
func (s *Session) Recv() (stream byte, data []byte, exit *api.StreamExit, err error) {
	for {
		ev, err := s.events.Recv()
		if err != nil {
			// Whatever runs is killed, as a closed terminal would hang it up, unless
			// the session is kept.
			s.Leave()
			return 0, nil, nil, fmt.Errorf("the sandbox ended the stream: %w", err)
		}
		switch e := ev.Event.(type) {
		case *pb.ProcessEvent_Output:
			stream = api.StreamStdout
			if e.Output.Stream == pb.Stream_STREAM_STDERR {
				stream = api.StreamStderr
			}
			return stream, e.Output.Data, nil, nil
		case *pb.ProcessEvent_Exited:
			if s.kept {
				// A tombstone for a while, so that an attach to the ended session is
				// told it is gone rather than adopted (see Attach).
				key := keptKey(s.sandboxID, s.id)
				if v, ok := s.o.kept.Load(key); ok && v.(*keptSession).agent == s.agent {
					tomb := &keptSession{agent: s.agent, ended: true}
					o := s.o
					tomb.idle = time.AfterFunc(keptIdle, func() { o.kept.CompareAndDelete(key, tomb) })
					if !o.kept.CompareAndSwap(key, v, tomb) {
						tomb.idle.Stop()
					}
				}
			}
			x := s.exit(e.Exited)
			return 0, nil, &x, nil
		}
	}
}

// exit is the session's exit message: how the command ended, and the limit it met.
func (s *Session) exit(e *pb.ExitStatus) api.StreamExit {
	x := api.StreamExit{Type: "exit", ExitCode: int(e.GetExitCode()), Signal: int(e.GetSignal()), Error: e.GetError()}
	end := commandEnd{signal: x.Signal, timedOut: s.timedOut.Load(), timeout: fmt.Sprintf("the policy's timeout (%s)", s.in.timeout())}
	var msg string
	x.Limit, msg = limitHit(end, s.before, countLimits(s.sb), s.sb.Limits)
	x.Error = cmp.Or(x.Error, msg)
	return x
}

// Write sends data to the command's standard input.
func (s *Session) Write(data []byte) error { return s.agent.WriteStdin(s.ctx, s.id, data, false) }

// CloseInput closes the command's standard input.
func (s *Session) CloseInput() error { return s.agent.WriteStdin(s.ctx, s.id, nil, true) }

// Resize sets the terminal's size.
func (s *Session) Resize(rows, cols uint32) error { return s.agent.Resize(s.ctx, s.id, rows, cols) }

// Signal sends sig (1 to 64) to the command.
func (s *Session) Signal(sig int) error {
	if sig < 1 || sig > 64 {
		return fmt.Errorf("signal %d: want 1 to 64: %w", sig, errdefs.ErrInvalidArgument)
	}
	return s.agent.Signal(s.ctx, s.id, int32(sig))
}

// Kill kills what the session runs.
func (s *Session) Kill() {
	if s.id != "" {
		_ = s.agent.Signal(context.WithoutCancel(s.ctx), s.id, 9)
	}
}

// Close releases the session; what it runs goes on unless it was killed.
func (s *Session) Close() {
	if s.kill != nil {
		s.kill.Stop()
	}
	s.cancel()
}

// audit records a command run in a sandbox, or refused, with the policy's decision when
// one is in force. Only the program's name and the rule are kept, never the reason: the
// arguments, which the reason quotes, may carry secrets a user typed. An environment entry
// refused is named by its name, never its value.
func (o *Ops) audit(ctx context.Context, c fleet.Caller, action, sandboxID string, argv []string, in InForce, d policy.Decision, env []string) {
	detail := map[string]any{"sandbox": sandboxID, "program": argv[0]}
	if in.pol != nil && !d.Allow {
		var e *policy.EnvError
		if errors.As(policy.GatedEnv(env, in.pol.EnvNames()), &e) && e.Rule == d.Rule {
			detail["env"] = e.Name
		}
	}
	o.event(ctx, c.UserID, action, policyDetail(detail, in, d))
}

// capabilityEnv refuses an env entry outside the allowlist of an exec under a capability
// token (policy.GatedEnv: the safe set only), with an audit event that names the variable
// and the rule, never its value. The agent refuses it again where the command runs.
func (o *Ops) capabilityEnv(ctx context.Context, c fleet.Caller, sandboxID string, argv, env []string) error {
	h := heldCapabilityOf(ctx)
	if h == nil {
		return nil
	}
	var e *policy.EnvError
	if !errors.As(policy.GatedEnv(env, nil), &e) {
		return nil
	}
	o.event(ctx, c.UserID, "sandbox.exec_denied", map[string]any{"sandbox": sandboxID, "program": argv[0], "capability": h.id, "env": e.Name, "rule": e.Rule})
	return fmt.Errorf("exec under a capability token: %v: %w", e, errdefs.ErrPermissionDenied)
}
