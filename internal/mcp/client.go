package mcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"sync"
	"time"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/runner"
)

// Client is the Backend over the public Go client: what `paddock mcp` serves over stdio.
// Each tool call is one or more API requests, decided and audited by the server as any
// other client's.
type Client struct{ C *paddock.Client }

var _ Backend = Client{}

func (c Client) CreateSandbox(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	sb, err := c.C.Sandboxes.CreateRequest(ctx, req)
	if err != nil {
		return api.Sandbox{}, err
	}
	return sb.Describe(ctx)
}

func (c Client) ListSandboxes(ctx context.Context) ([]api.Sandbox, error) {
	return c.C.Sandboxes.List(ctx, false)
}

func (c Client) Lifecycle(ctx context.Context, id, op string) (api.Sandbox, error) {
	sb := c.C.Sandbox(id)
	switch op {
	case "stop":
		return sb.Stop(ctx)
	case "start":
		return sb.Start(ctx)
	case "restart":
		return sb.Restart(ctx)
	}
	return api.Sandbox{}, fmt.Errorf("lifecycle operation %q: want stop, start or restart", op)
}

func (c Client) DeleteSandbox(ctx context.Context, id string) error {
	return c.C.Sandbox(id).Delete(ctx)
}

func (c Client) AppStatus(ctx context.Context, id string) (api.AppStatus, error) {
	return c.C.Sandbox(id).App(ctx)
}

func (c Client) Run(ctx context.Context, id string, start api.StreamStart, stdin []byte, out func(byte, []byte)) (api.StreamExit, error) {
	st, err := c.C.Sandbox(id).Stream(ctx, start)
	if err != nil {
		return api.StreamExit{}, err
	}
	exited := false
	defer func() {
		if exited {
			// The command is over: its result need not wait for the close handshake.
			go st.Close()
			return
		}
		st.Close() // a command still running when ctx ends is killed
	}()
	if len(stdin) > 0 {
		if err := st.Write(ctx, stdin); err != nil {
			return api.StreamExit{}, err
		}
	}
	if err := st.CloseStdin(ctx); err != nil {
		return api.StreamExit{}, err
	}
	for {
		o, err := st.Next(ctx)
		if err != nil {
			return api.StreamExit{}, err
		}
		if o.Exit != nil {
			exited = true
			return *o.Exit, nil
		}
		out(o.Stream, o.Data)
	}
}

func (c Client) ListFiles(ctx context.Context, id, dir string) ([]api.FileInfo, error) {
	return c.C.Sandbox(id).ListFiles(ctx, dir)
}

func (c Client) ReadFile(ctx context.Context, id, p string, max int64) ([]byte, bool, error) {
	r, err := c.C.Sandbox(id).ReadFile(ctx, p)
	if err != nil {
		return nil, false, err
	}
	defer r.Close()
	return readAtMost(r, max)
}

// readAtMost reads up to max bytes of r, and whether more followed.
func readAtMost(r io.Reader, max int64) ([]byte, bool, error) {
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, false, fmt.Errorf("reading the file: %w", err)
	}
	if int64(len(data)) > max {
		return data[:max], true, nil
	}
	return data, false, nil
}

func (c Client) WriteFile(ctx context.Context, id, p string, data []byte, mode fs.FileMode) (api.FileInfo, error) {
	return c.C.Sandbox(id).WriteFile(ctx, p, bytes.NewReader(data), mode)
}

func (c Client) Move(ctx context.Context, id string, req api.FileMoveRequest) (api.FileInfo, error) {
	return c.C.Sandbox(id).Move(ctx, req.From, req.To, req.Overwrite)
}

func (c Client) Remove(ctx context.Context, id, p string, recursive bool) error {
	return c.C.Sandbox(id).Remove(ctx, p, recursive)
}

func (c Client) History(ctx context.Context, id string) (api.History, error) {
	return c.C.Sandbox(id).History(ctx)
}

func (c Client) Checkpoint(ctx context.Context, id, message string) (api.CheckpointResult, error) {
	return c.C.Sandbox(id).Checkpoint(ctx, message)
}

func (c Client) Undo(ctx context.Context, id string) (api.RestoreResult, error) {
	return c.C.Sandbox(id).Undo(ctx)
}

func (c Client) Redo(ctx context.Context, id string) (api.RestoreResult, error) {
	return c.C.Sandbox(id).Redo(ctx)
}

func (c Client) Restore(ctx context.Context, id, checkpoint string) (api.RestoreResult, error) {
	return c.C.Sandbox(id).Restore(ctx, checkpoint)
}

// Audited is the Backend of `paddock mcp`: Client, with each tool call recorded as the
// caller's mcp.tool_call event. The API records what a call changes; reads, and calls
// refused before any request, leave a trace only this way. Calls are reported in order,
// by one goroutine, so that a tool's result never waits for its record.
type Audited struct {
	Client
	log   *slog.Logger
	mu    sync.Mutex
	calls chan api.MCPToolCall // nil once closed
	done  chan struct{}
}

var _ Auditor = (*Audited)(nil)

// Bounds on recording calls: how long one report may take, and how many may wait.
const (
	auditTimeout = 2 * time.Second
	auditQueue   = 256
)

// NewAudited is c, recording its tool calls; log gets, at debug, a call that could not
// be recorded. Close it when the server is done.
func NewAudited(c Client, log *slog.Logger) *Audited {
	a := &Audited{Client: c, log: log, calls: make(chan api.MCPToolCall, auditQueue), done: make(chan struct{})}
	go a.report()
	return a
}

// ToolCalled queues the call to be recorded. A call that finds the queue full is
// dropped (logged): the tool's result does not wait.
func (a *Audited) ToolCalled(_ context.Context, tool, sandbox string, err error) {
	call := api.MCPToolCall{Tool: tool}
	if runner.ValidID(sandbox) {
		call.Sandbox = sandbox
	}
	if err != nil {
		_, call.Error = api.StatusOf(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.calls == nil {
		return // closed: the server is done
	}
	select {
	case a.calls <- call:
	default:
		a.log.Debug("mcp: tool call not recorded: too many waiting", "tool", tool)
	}
}

// Close waits for the calls queued so far to be recorded, at most auditTimeout: a
// server that does not answer does not hold up the exit.
func (a *Audited) Close() {
	a.mu.Lock()
	if a.calls != nil {
		close(a.calls)
		a.calls = nil
	}
	a.mu.Unlock()
	select {
	case <-a.done:
	case <-time.After(auditTimeout):
		a.log.Debug("mcp: tool calls not recorded: the server did not answer in time")
	}
}

func (a *Audited) report() {
	defer close(a.done)
	a.mu.Lock()
	calls := a.calls
	a.mu.Unlock()
	for call := range calls {
		if err := a.record(call); err != nil {
			a.log.Debug("mcp: tool call not recorded", "tool", call.Tool, "err", err)
		}
	}
}

// record asks the server to record call, as the caller its credentials name.
func (a *Audited) record(call api.MCPToolCall) error {
	ctx, cancel := context.WithTimeout(context.Background(), auditTimeout)
	defer cancel()
	err := a.C.RecordMCPToolCall(ctx, call)
	if errors.Is(err, errdefs.ErrNotFound) && call.Sandbox != "" {
		// The sandbox is none of the caller's, or no longer is (delete_sandbox): the
		// call is recorded without it.
		call.Sandbox = ""
		err = a.C.RecordMCPToolCall(ctx, call)
	}
	return err
}
