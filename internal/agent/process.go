package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/paddockhq/paddock/internal/agent/history"
	"github.com/paddockhq/paddock/internal/agent/session"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/policy"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
	"github.com/paddockhq/paddock/internal/wire/channel"
)

// Limits on what one request may ask for.
const (
	maxArgs           = 4096
	maxExecuteOutput  = channel.MaxExecuteOutput
	defaultExecOutput = 1 << 20
	maxTTYDim         = 4096
)

// processService serves the Process RPCs over a session.Manager.
type processService struct {
	pb.UnimplementedProcessServer
	m *session.Manager
	// hist takes a checkpoint (cause "exec") when a session ends; nil in tests of
	// sessions alone.
	hist *historyService
	// ctx is the agent's: a session still running when it ends is not waited for.
	ctx context.Context
	// caps verifies the capability token a request carries.
	caps *capabilities
	// gatedRoot is where an exec a token limits runs chrooted ("": the sandbox's root).
	gatedRoot string

	// recording holds, by session ID, a channel closed once the checkpoint of that
	// session's end is taken; the entry goes once it is closed. An exit is reported (to
	// Start, Attach and Wait) only after it, so that a caller who reads the history next
	// finds the checkpoint, as after Execute.
	mu        sync.Mutex
	recording map[string]chan struct{}
}

// recordExit checkpoints the workspace once s has exited.
func (p *processService) recordExit(s *session.Session, argv []string) {
	if p.hist == nil {
		return
	}
	done := make(chan struct{})
	p.mu.Lock()
	if p.recording == nil {
		p.recording = map[string]chan struct{}{}
	}
	p.recording[s.ID] = done
	p.mu.Unlock()
	go func() {
		defer func() {
			p.mu.Lock()
			delete(p.recording, s.ID)
			p.mu.Unlock()
			close(done)
		}()
		if _, err := s.Wait(p.ctx); err == nil {
			if testHookBeforeExecRecord != nil {
				testHookBeforeExecRecord()
			}
			p.hist.record(history.CauseExec, execMessage(argv))
		}
	}()
}

// testHookBeforeExecRecord, when set, runs between a streamed session's exit and its
// checkpoint (tests widen that window with it).
var testHookBeforeExecRecord func()

// waitExit waits for s to exit and for the checkpoint of its end, if one is being taken.
func (p *processService) waitExit(ctx context.Context, s *session.Session) (session.ExitStatus, error) {
	st, err := s.Wait(ctx)
	if err != nil {
		return st, err
	}
	p.mu.Lock()
	done := p.recording[s.ID]
	p.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			return st, ctx.Err()
		}
	}
	return st, nil
}

var _ pb.ProcessServer = (*processService)(nil)

func (p *processService) Start(req *pb.StartRequest, stream pb.Process_StartServer) error {
	spec, err := startSpec(req.GetArgv(), req.GetEnv(), req.GetAddEnv(), req.GetCwd(), req.GetTty())
	if err != nil {
		return errdefs.ToGRPC(err)
	}
	if err := p.allowExec(stream.Context(), req.GetCapability(), req.GetGate(), &spec); err != nil {
		return errdefs.ToGRPC(err)
	}
	spec.ID = req.GetSessionId()
	if p.hist != nil {
		p.hist.afterFirst(stream.Context()) // see historyService.first
	}
	s, err := p.m.Start(spec)
	if err != nil {
		return errdefs.ToGRPC(err)
	}
	p.recordExit(s, spec.Argv)
	return p.streamSession(stream.Context(), s, 0, stream.Send)
}

func (p *processService) Attach(req *pb.AttachRequest, stream pb.Process_AttachServer) error {
	s, err := p.m.Get(req.GetSessionId())
	if err != nil {
		return errdefs.ToGRPC(err)
	}
	return p.streamSession(stream.Context(), s, req.GetOffset(), stream.Send)
}

// streamSession sends Started, the output from offset, and Exited; it returns early, with
// the session still running, when the caller goes away.
func (p *processService) streamSession(ctx context.Context, s *session.Session, offset uint64, send func(*pb.ProcessEvent) error) error {
	r := s.Attach(offset)
	defer r.Close()
	if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Started{Started: &pb.Started{SessionId: s.ID, Pid: int32(s.PID)}}}); err != nil {
		return err
	}
	for {
		c, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return errdefs.ToGRPC(err)
		}
		out := &pb.Output{Stream: pb.Stream(c.Stream), Data: c.Data, Offset: c.Offset, Lost: c.Lost}
		if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Output{Output: out}}); err != nil {
			return err
		}
	}
	st, err := p.waitExit(ctx, s)
	if err != nil {
		return errdefs.ToGRPC(err)
	}
	return send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Exited{Exited: exitStatus(s.ID, st)}})
}

func exitStatus(id string, st session.ExitStatus) *pb.ExitStatus {
	return &pb.ExitStatus{SessionId: id, ExitCode: int32(st.Code), Signal: int32(st.Signal), Error: st.Err}
}

func (p *processService) Execute(ctx context.Context, req *pb.ExecuteRequest) (*pb.ExecuteResponse, error) {
	spec, err := startSpec(req.GetArgv(), req.GetEnv(), req.GetAddEnv(), req.GetCwd(), nil)
	if err != nil {
		return nil, errdefs.ToGRPC(err)
	}
	if err := p.allowExec(ctx, req.GetCapability(), req.GetGate(), &spec); err != nil {
		return nil, errdefs.ToGRPC(err)
	}
	if p.hist != nil {
		p.hist.afterFirst(ctx) // see historyService.first
	}
	limit, err := outputLimit(req.GetMaxOutputBytes())
	if err != nil {
		return nil, errdefs.ToGRPC(err)
	}
	spec.Ephemeral = true
	s, err := p.m.Start(spec)
	if err != nil {
		return nil, errdefs.ToGRPC(err)
	}
	defer p.m.Remove(s.ID)
	resp, err := execute(ctx, s, req, limit)
	// Before the answer, so that a caller who reads the history next finds the checkpoint.
	if p.hist != nil {
		p.hist.record(history.CauseExec, execMessage(spec.Argv))
	}
	return resp, errdefs.ToGRPC(err)
}

// allowExec decides a gated exec: one under a capability token, or one whose programs a
// policy limits (gate). Its environment must be within the allowlist (policy.GatedEnv:
// the safe set, and under a policy the names it lists); under a token, every program the
// command line runs must be granted, and spec is limited to executing those programs'
// files (and the interpreters they need) unless the token grants every program.
func (p *processService) allowExec(ctx context.Context, token string, gate *pb.ExecGate, spec *session.Spec) error {
	if token == "" && gate == nil {
		return nil
	}
	extra := gate.GetEnv()
	if token != "" {
		extra = nil
	}
	if err := policy.GatedEnv(spec.Env, extra); err != nil {
		return fmt.Errorf("a gated exec: %v: %w", err, errdefs.ErrPermissionDenied)
	}
	if token == "" {
		return nil
	}
	progs, err := p.caps.allowExec(ctx, token, spec.Argv, spec.Env)
	if err != nil {
		return err
	}
	only, err := p.caps.execOnly(ctx, token, p.m, spec, progs)
	if err != nil {
		return err
	}
	spec.ExecOnly = only
	if only != nil {
		spec.Root = p.gatedRoot // where nothing written can be executed or mapped executable
	}
	return nil
}

func outputLimit(n uint64) (int, error) {
	switch {
	case n == 0:
		return defaultExecOutput, nil
	case n > maxExecuteOutput:
		return 0, fmt.Errorf("max_output_bytes %d is over %d: %w", n, maxExecuteOutput, errdefs.ErrInvalidArgument)
	}
	return int(n), nil
}

// execute feeds stdin, gathers bounded output (reading on past the bound so the command is
// never blocked on a full pipe), and kills the process group at the timeout or when the
// caller goes away.
func execute(ctx context.Context, s *session.Session, req *pb.ExecuteRequest, limit int) (*pb.ExecuteResponse, error) {
	resp := &pb.ExecuteResponse{}
	if s.PID != 0 {
		go func() { _ = s.WriteStdin(req.GetStdin(), true) }()
	}
	var timeout <-chan time.Time
	if ms := req.GetTimeoutMs(); ms > 0 {
		t := time.NewTimer(time.Duration(ms) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	var timedOut atomic.Bool
	go func() {
		select {
		case <-timeout:
			timedOut.Store(true)
			_ = s.Signal(syscall.SIGKILL)
		case <-ctx.Done():
			_ = s.Signal(syscall.SIGKILL)
		case <-waitDone(s):
		}
	}()
	var out, errb bytes.Buffer
	r := s.Attach(0)
	defer r.Close()
	for {
		c, err := r.Next(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		buf, trunc := &out, &resp.StdoutTruncated
		if c.Stream == session.Stderr {
			buf, trunc = &errb, &resp.StderrTruncated
		}
		keep := min(len(c.Data), limit-buf.Len())
		buf.Write(c.Data[:keep])
		*trunc = *trunc || keep < len(c.Data)
	}
	st, _ := s.Wait(context.Background())
	resp.Status, resp.Stdout, resp.Stderr = exitStatus(s.ID, st), out.Bytes(), errb.Bytes()
	resp.TimedOut = timedOut.Load()
	return resp, ctx.Err()
}

func waitDone(s *session.Session) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		_, _ = s.Wait(context.Background())
		close(ch)
	}()
	return ch
}

func (p *processService) WriteStdin(ctx context.Context, req *pb.WriteStdinRequest) (*pb.WriteStdinResponse, error) {
	s, err := p.m.Get(req.GetSessionId())
	if err != nil {
		return nil, errdefs.ToGRPC(err)
	}
	return &pb.WriteStdinResponse{}, errdefs.ToGRPC(s.WriteStdin(req.GetData(), req.GetClose()))
}

func (p *processService) SendSignal(ctx context.Context, req *pb.SendSignalRequest) (*pb.SendSignalResponse, error) {
	sig := req.GetSignal()
	if sig < 1 || sig > 64 {
		return nil, errdefs.ToGRPC(fmt.Errorf("signal %d is not a Linux signal number (1-64): %w", sig, errdefs.ErrInvalidArgument))
	}
	s, err := p.m.Get(req.GetSessionId())
	if err != nil {
		return nil, errdefs.ToGRPC(err)
	}
	return &pb.SendSignalResponse{}, errdefs.ToGRPC(s.Signal(syscall.Signal(sig)))
}

func (p *processService) ResizeTTY(ctx context.Context, req *pb.ResizeTTYRequest) (*pb.ResizeTTYResponse, error) {
	size, err := ttySize(req.GetSize())
	if err != nil || size == nil {
		return nil, errdefs.ToGRPC(errors.Join(err, fmt.Errorf("size is required: %w", errdefs.ErrInvalidArgument)))
	}
	s, err := p.m.Get(req.GetSessionId())
	if err != nil {
		return nil, errdefs.ToGRPC(err)
	}
	return &pb.ResizeTTYResponse{}, errdefs.ToGRPC(s.Resize(*size))
}

func (p *processService) Wait(ctx context.Context, req *pb.WaitRequest) (*pb.ExitStatus, error) {
	s, err := p.m.Get(req.GetSessionId())
	if err != nil {
		return nil, errdefs.ToGRPC(err)
	}
	st, err := p.waitExit(ctx, s)
	if err != nil {
		return nil, errdefs.ToGRPC(err)
	}
	return exitStatus(s.ID, st), nil
}

func (p *processService) List(ctx context.Context, req *pb.ListRequest) (*pb.ListResponse, error) {
	resp := &pb.ListResponse{}
	for _, s := range p.m.List() {
		info := &pb.SessionInfo{SessionId: s.ID, Argv: s.Argv, Pid: int32(s.PID), Running: s.Running(), Tty: s.TTY}
		if st, done := s.Status(); done {
			info.Exit = exitStatus(s.ID, st)
		}
		resp.Sessions = append(resp.Sessions, info)
	}
	return resp, nil
}

// startSpec validates a command line from a request.
func startSpec(argv, env []string, addEnv bool, cwd string, tty *pb.TTYSize) (session.Spec, error) {
	if len(argv) > maxArgs {
		return session.Spec{}, fmt.Errorf("argv has %d entries, over %d: %w", len(argv), maxArgs, errdefs.ErrInvalidArgument)
	}
	cmd := &wire.Command{Argv: argv, Env: env, Cwd: cwd}
	if err := cmd.Validate(); err != nil {
		return session.Spec{}, err
	}
	size, err := ttySize(tty)
	if err != nil {
		return session.Spec{}, err
	}
	return session.Spec{Argv: argv, Env: env, AddEnv: addEnv, Cwd: cwd, TTY: size}, nil
}

func ttySize(t *pb.TTYSize) (*session.Size, error) {
	if t == nil {
		return nil, nil
	}
	if t.GetRows() == 0 || t.GetCols() == 0 || t.GetRows() > maxTTYDim || t.GetCols() > maxTTYDim {
		return nil, fmt.Errorf("tty size %dx%d: rows and cols must be 1-%d: %w", t.GetRows(), t.GetCols(), maxTTYDim, errdefs.ErrInvalidArgument)
	}
	return &session.Size{Rows: uint16(t.GetRows()), Cols: uint16(t.GetCols())}, nil
}
