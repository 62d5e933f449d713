package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/policy"
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
	// maxExecBody bounds an exec request: the command line plus its whole stdin.
	maxExecBody = 8 << 20
)

func (s *Server) exec(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	var req api.ExecRequest
	if err := api.DecodeJSON(w, r, &req, maxExecBody); err != nil {
		return err
	}
	out, err := s.execute(r, c, req)
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, out)
	return nil
}

// execute runs a one-shot command in the sandbox r names, under its policy, capability
// and limits.
func (s *Server) execute(r *http.Request, c fleet.Caller, req api.ExecRequest) (api.ExecResult, error) {
	if err := checkCommand(req.Argv, req.Env); err != nil {
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
	sb, err := s.fleet.Handle(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return api.ExecResult{}, err
	}
	in, err := s.policyOf(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return api.ExecResult{}, err
	}
	var d policy.Decision
	if in.pol != nil {
		if d = in.exec(req.Argv, req.Env, req.Stdin); !d.Allow {
			s.audit(r.Context(), c, "sandbox.exec_denied", r.PathValue("id"), req.Argv, in, d, req.Env)
			return api.ExecResult{}, in.denied(d)
		}
	}
	if err := s.capabilityEnv(r.Context(), c, r.PathValue("id"), req.Argv, req.Env); err != nil {
		return api.ExecResult{}, err
	}
	capTok, err := s.capabilityExec(r.Context(), req.Argv, req.Env)
	if err != nil {
		return api.ExecResult{}, err
	}
	s.audit(r.Context(), c, "sandbox.exec", r.PathValue("id"), req.Argv, in, d, nil)
	timeoutBy := "the exec's timeout"
	if t := in.timeout(); t > 0 && t <= timeout {
		timeout, timeoutBy = t, "the policy's timeout"
	}
	// The agent enforces the timeout; the RPC gets a little longer to report it.
	ctx, cancel := context.WithTimeout(r.Context(), timeout+5*time.Second)
	defer cancel()
	before := countLimits(sb)
	res, err := pb.NewProcessClient(sb.Conn()).Execute(ctx, &pb.ExecuteRequest{
		Argv: req.Argv, Env: req.Env, AddEnv: true, Cwd: req.Cwd, Stdin: req.Stdin,
		TimeoutMs: uint64(timeout.Milliseconds()), MaxOutputBytes: uint64(output), Capability: capTok, Gate: in.gate(),
	})
	if err != nil {
		return api.ExecResult{}, fmt.Errorf("exec in sandbox %s: %w", r.PathValue("id"), s.fromAgent(r, c, "sandbox.exec_denied", map[string]any{"program": req.Argv[0]}, err))
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

func checkCommand(argv, env []string) error {
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

// execStream serves the exec stream and the interactive shell over a WebSocket (the
// protocol is in internal/api/stream.go). Origin is checked by websocket.Accept: a page of
// another origin cannot open a shell with the user's cookie.
func (s *Server) execStream(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	sb, err := s.fleet.Handle(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	in, err := s.policyOf(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{api.StreamProtocol}, OriginPatterns: s.cfg.TrustedOrigins})
	if err != nil {
		return errResponded // Accept wrote the response
	}
	defer ws.CloseNow()
	ws.SetReadLimit(1 << 20)
	ctx := r.Context()
	start, err := readStart(ctx, ws)
	if err != nil {
		ws.Close(api.CloseBadRequest, truncateReason(err.Error()))
		return errResponded
	}
	var d policy.Decision
	if in.pol != nil {
		// The command is known only now, after the upgrade: a denial is an exit that says
		// why, and a close with its own code. Nothing reached the sandbox.
		if d = in.stream(start.Argv, start.Env); !d.Allow {
			s.audit(ctx, c, "sandbox.exec_stream_denied", r.PathValue("id"), start.Argv, in, d, start.Env)
			s.refuseStream(ctx, ws, in.denied(d).Error())
			return errResponded
		}
	}
	err = s.capabilityEnv(ctx, c, r.PathValue("id"), start.Argv, start.Env)
	var capTok string
	if err == nil {
		capTok, err = s.capabilityExec(ctx, start.Argv, start.Env)
	}
	if err != nil {
		s.refuseStream(ctx, ws, err.Error())
		return errResponded
	}
	s.audit(ctx, c, "sandbox.exec_stream", r.PathValue("id"), start.Argv, in, d, nil)
	req := &pb.StartRequest{Argv: start.Argv, Env: start.Env, AddEnv: true, Cwd: start.Cwd, Capability: capTok, Gate: in.gate()}
	if start.TTY != nil {
		req.Tty = &pb.TTYSize{Rows: start.TTY.Rows, Cols: start.TTY.Cols}
	}
	pc := pb.NewProcessClient(sb.Conn())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	before := countLimits(sb)
	var timedOut atomic.Bool
	// exit is the stream's exit message: how the command ended, and the limit it met.
	exit := func(e *pb.ExitStatus) api.StreamExit {
		x := exitOf(e)
		end := commandEnd{signal: x.Signal, timedOut: timedOut.Load(), timeout: fmt.Sprintf("the policy's timeout (%s)", in.timeout())}
		var msg string
		x.Limit, msg = limitHit(end, before, countLimits(sb), sb.Limits)
		x.Error = cmp.Or(x.Error, msg)
		return x
	}
	events, err := pc.Start(ctx, req)
	if err != nil {
		s.endStream(ctx, ws, api.StreamExit{Type: "exit", ExitCode: 127, Error: errdefs.FromGRPC(err).Error()})
		return errResponded
	}
	first, err := events.Recv()
	if err != nil {
		s.endStream(ctx, ws, api.StreamExit{Type: "exit", ExitCode: 127, Error: errdefs.FromGRPC(err).Error()})
		return errResponded
	}
	session := first.GetStarted().GetSessionId()
	if ex := first.GetExited(); ex != nil {
		s.endStream(ctx, ws, exit(ex))
		return errResponded
	}
	if t := in.timeout(); t > 0 {
		// The policy's wall-clock limit: the session is killed, and ends as killed.
		kill := time.AfterFunc(t, func() {
			timedOut.Store(true)
			_, _ = pc.SendSignal(context.WithoutCancel(ctx), &pb.SendSignalRequest{SessionId: session, Signal: 9})
		})
		defer kill.Stop()
	}
	go s.pumpInput(ctx, ws, pc, session)
	for {
		ev, err := events.Recv()
		if err != nil {
			// The stream broke before an exit: the client went away or the sandbox did.
			if ctx.Err() == nil {
				ws.Close(websocket.StatusInternalError, "the sandbox ended the stream: "+truncateReason(errdefs.FromGRPC(err).Error()))
			}
			// Whatever runs is killed, as a closed terminal would hang it up.
			_, _ = pc.SendSignal(context.WithoutCancel(ctx), &pb.SendSignalRequest{SessionId: session, Signal: 9})
			return errResponded
		}
		switch e := ev.Event.(type) {
		case *pb.ProcessEvent_Output:
			stream := api.StreamStdout
			if e.Output.Stream == pb.Stream_STREAM_STDERR {
				stream = api.StreamStderr
			}
			msg := make([]byte, 1+len(e.Output.Data))
			msg[0] = stream
			copy(msg[1:], e.Output.Data)
			if err := ws.Write(ctx, websocket.MessageBinary, msg); err != nil {
				_, _ = pc.SendSignal(context.WithoutCancel(ctx), &pb.SendSignalRequest{SessionId: session, Signal: 9})
				return errResponded
			}
		case *pb.ProcessEvent_Exited:
			s.endStream(ctx, ws, exit(e.Exited))
			return errResponded
		}
	}
}

func readStart(ctx context.Context, ws *websocket.Conn) (api.StreamStart, error) {
	var start api.StreamStart
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	typ, data, err := ws.Read(rctx)
	if err != nil {
		return start, fmt.Errorf("no start message: %w", err)
	}
	if typ != websocket.MessageText {
		return start, errors.New("the first message must be a JSON text message: {\"argv\": [...]}")
	}
	if err := api.Decode(bytes.NewReader(data), &start, 1<<20); err != nil {
		return start, err
	}
	return start, checkCommand(start.Argv, start.Env)
}

// pumpInput forwards the client's stdin and control messages to the session.
func (s *Server) pumpInput(ctx context.Context, ws *websocket.Conn, pc pb.ProcessClient, session string) {
	for {
		typ, data, err := ws.Read(ctx)
		if err != nil {
			return
		}
		if typ == websocket.MessageBinary {
			if _, err := pc.WriteStdin(ctx, &pb.WriteStdinRequest{SessionId: session, Data: data}); err != nil {
				return
			}
			continue
		}
		var ctl api.StreamControl
		if err := json.Unmarshal(data, &ctl); err != nil {
			continue // a control message we cannot read changes nothing
		}
		switch ctl.Type {
		case "resize":
			_, _ = pc.ResizeTTY(ctx, &pb.ResizeTTYRequest{SessionId: session, Size: &pb.TTYSize{Rows: ctl.Rows, Cols: ctl.Cols}})
		case "signal":
			if ctl.Signal > 0 && ctl.Signal < 65 {
				_, _ = pc.SendSignal(ctx, &pb.SendSignalRequest{SessionId: session, Signal: int32(ctl.Signal)})
			}
		case "eof":
			_, _ = pc.WriteStdin(ctx, &pb.WriteStdinRequest{SessionId: session, Close: true})
		}
	}
}

func (s *Server) endStream(ctx context.Context, ws *websocket.Conn, exit api.StreamExit) {
	b, _ := json.Marshal(exit)
	if err := ws.Write(ctx, websocket.MessageText, b); err == nil {
		ws.Close(websocket.StatusNormalClosure, "exited")
	}
}

func exitOf(e *pb.ExitStatus) api.StreamExit {
	return api.StreamExit{Type: "exit", ExitCode: int(e.GetExitCode()), Signal: int(e.GetSignal()), Error: e.GetError()}
}

// audit records a command run in a sandbox, or refused, with the policy's decision when
// one is in force. Only the program's name and the rule are kept, never the reason: the
// arguments, which the reason quotes, may carry secrets a user typed. An environment entry
// refused is named by its name, never its value.
func (s *Server) audit(ctx context.Context, c fleet.Caller, action, sandboxID string, argv []string, in inForce, d policy.Decision, env []string) {
	detail := map[string]any{"sandbox": sandboxID, "program": argv[0]}
	if in.pol != nil && !d.Allow {
		var e *policy.EnvError
		if errors.As(policy.GatedEnv(env, in.pol.EnvNames()), &e) && e.Rule == d.Rule {
			detail["env"] = e.Name
		}
	}
	s.event(ctx, c.UserID, action, policyDetail(detail, in, d))
}

// capabilityEnv refuses an env entry outside the allowlist of an exec under a capability
// token (policy.GatedEnv: the safe set only), with an audit event that names the variable
// and the rule, never its value. The agent refuses it again where the command runs.
func (s *Server) capabilityEnv(ctx context.Context, c fleet.Caller, sandboxID string, argv, env []string) error {
	h := heldCapabilityOf(ctx)
	if h == nil {
		return nil
	}
	var e *policy.EnvError
	if !errors.As(policy.GatedEnv(env, nil), &e) {
		return nil
	}
	s.event(ctx, c.UserID, "sandbox.exec_denied", map[string]any{"sandbox": sandboxID, "program": argv[0], "capability": h.id, "env": e.Name, "rule": e.Rule})
	return fmt.Errorf("exec under a capability token: %v: %w", e, errdefs.ErrPermissionDenied)
}

// refuseStream ends a stream whose command was refused before anything reached the
// sandbox: an exit that says why, and a close with its own code.
func (s *Server) refuseStream(ctx context.Context, ws *websocket.Conn, msg string) {
	if b, err := json.Marshal(api.StreamExit{Type: "exit", ExitCode: 126, Error: msg}); err == nil {
		_ = ws.Write(ctx, websocket.MessageText, b)
	}
	ws.Close(api.ClosePermissionDenied, truncateReason(msg))
}

// truncateReason keeps a close reason within the 123 bytes a close frame allows.
func truncateReason(s string) string {
	if len(s) > 120 {
		return s[:120]
	}
	return s
}
