package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/auth"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	pmcp "github.com/paddockhq/paddock/internal/mcp"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandboxops"
	"github.com/paddockhq/paddock/internal/store"
)

// maxMCPBody bounds one MCP request: a tool call's arguments (write_file's content is
// the largest) with room for the JSON-RPC envelope.
const maxMCPBody = 8 << 20

type mcpCallerKey struct{}

// mcpCaller is who an MCP request acts as. readOnly is the ID of the caller's API token
// when that token lacks scope write ("" otherwise): its server serves the read-only
// tools, and a refusal names that token.
type mcpCaller struct {
	fleet.Caller
	readOnly string
	prefix   string
}

// mcpHandler serves MCP over streamable HTTP at /mcp. Each request is authenticated by
// an API token (Authorization: Bearer) with scope read, and served by an MCP server
// whose tools call the operations layer as that token's user: the same ownership,
// policy, capability and audit path as the API, and each tool call an event. A token
// without scope write gets the tools that only read; a call of another is an error
// result naming the scope. The handler is stateless, so a request never acts as anyone
// but its own token's user, and a token revoked or expired is refused at its next
// request.
func (s *Server) mcpHandler() http.Handler {
	// One MCP server per caller, made at their first request: making one (its tools'
	// schemas) costs milliseconds, and a caller's server acts as nobody else.
	var servers sync.Map // mcpCaller → *sdk.Server
	h := sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server {
		c, _ := r.Context().Value(mcpCallerKey{}).(mcpCaller)
		if srv, ok := servers.Load(c); ok {
			return srv.(*sdk.Server)
		}
		srv, _ := servers.LoadOrStore(c, s.newMCPServer(c))
		return srv.(*sdk.Server)
	}, &sdk.StreamableHTTPOptions{Stateless: true, MaxRequestBodyBytes: maxMCPBody})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="paddock"`)
			api.WriteError(w, s.log, fmt.Errorf("/mcp takes an API token (Authorization: Bearer …; paddock token create makes one): %w", errdefs.ErrUnauthenticated))
			return
		}
		if _, ok := capabilityBearer(r); ok {
			api.WriteError(w, s.log, fmt.Errorf("/mcp takes an API token, not a capability token: %w", errdefs.ErrUnauthenticated))
			return
		}
		c, err := s.web.Identify(r)
		if err != nil {
			// The description is for an MCP client that shows the header, not the body.
			desc := strings.NewReplacer(`"`, "'", `\`, "/").Replace(errdefs.Clip(err.Error(), 240))
			w.Header().Set("WWW-Authenticate", `Bearer realm="paddock", error="invalid_token", error_description="`+desc+`"`)
			api.WriteError(w, s.log, err)
			return
		}
		if err := s.checkScope(r, c, auth.ScopeRead, "MCP at /mcp"); err != nil {
			api.WriteError(w, s.log, err)
			return
		}
		mc := mcpCaller{Caller: fleet.Caller{UserID: c.User.ID, Username: c.User.Username, Admin: isAdmin(c)}}
		if c.Token != nil && !auth.TokenScopes(*c.Token).Has(auth.ScopeWrite) {
			mc.readOnly, mc.prefix = c.Token.ID, c.Token.Prefix
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), mcpCallerKey{}, mc)))
	})
}

// newMCPServer is the MCP server of caller c: read-only when c's token lacks scope write.
func (s *Server) newMCPServer(c mcpCaller) *sdk.Server {
	opts := pmcp.Options{Log: s.log}
	if c.readOnly != "" {
		opts.ReadOnly = true
		opts.Refuse = func(ctx context.Context, tool string) error {
			what := "the MCP tool " + tool
			s.event(ctx, c.UserID, "auth.token.scope_denied", map[string]any{
				"token_id": c.readOnly, "prefix": c.prefix, "scope": string(auth.ScopeWrite), "request": what})
			return auth.ScopeError(auth.ScopeWrite, what)
		}
	}
	srv := pmcp.NewServer(&opsBackend{s: s, c: c.Caller}, opts)
	srv.AddReceivingMiddleware(keepAuthorization)
	return srv
}

// opsBackend is the MCP tools' Backend in the control plane: the operations layer (and
// the fleet, for the sandboxes' lifecycle, as the API's handlers use it), as caller c.
type opsBackend struct {
	s *Server
	c fleet.Caller
}

var _ pmcp.Auditor = (*opsBackend)(nil)

// ToolCalled records the call as an event, whatever the operation recorded itself.
func (b *opsBackend) ToolCalled(ctx context.Context, tool, sandbox string, err error) {
	detail := map[string]any{"tool": tool, "transport": "http"}
	if sandbox != "" {
		detail["sandbox"] = sandbox
	}
	if err != nil {
		_, code := api.StatusOf(err)
		detail["error"] = code
	}
	b.s.ops.Event(ctx, b.c.UserID, "mcp.tool_call", detail)
}

func (b *opsBackend) sandbox(ctx context.Context, sb store.Sandbox) (api.Sandbox, error) {
	role, err := b.s.fleet.RoleOf(ctx, sb.UserID, sb.ID)
	if err != nil {
		return api.Sandbox{}, err
	}
	return b.s.toAPI(sb, role), nil
}

func (b *opsBackend) CreateSandbox(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	sb, err := b.s.create(ctx, b.c, req)
	if err != nil && sb.ID == "" {
		return api.Sandbox{}, err
	}
	return b.s.toAPI(sb, ""), nil
}

func (b *opsBackend) ListSandboxes(ctx context.Context) ([]api.Sandbox, error) {
	list, err := b.s.fleet.List(ctx, b.c, false)
	if err != nil {
		return nil, err
	}
	roles := b.s.roleIndex(ctx, b.c.UserID)
	out := make([]api.Sandbox, 0, len(list))
	for _, sb := range list {
		out = append(out, b.s.toAPI(sb, roles[sb.ID]))
	}
	return out, nil
}

func (b *opsBackend) Lifecycle(ctx context.Context, id, op string) (api.Sandbox, error) {
	if v, ok, err := onHolder(ctx, b, id, func(r pmcp.Backend) (api.Sandbox, error) { return r.Lifecycle(ctx, id, op) }); ok {
		return v, err
	}
	do := map[string]func(*fleet.Fleet, context.Context, fleet.Caller, string) (store.Sandbox, error){
		"stop": (*fleet.Fleet).Stop, "start": (*fleet.Fleet).Start, "restart": (*fleet.Fleet).Restart,
	}[op]
	if do == nil {
		return api.Sandbox{}, fmt.Errorf("lifecycle operation %q: want stop, start or restart: %w", op, errdefs.ErrInvalidArgument)
	}
	sb, err := do(b.s.fleet, ctx, b.c, id)
	if err != nil && (sb.ID == "" || sb.State != api.StateFailed) {
		return api.Sandbox{}, err
	}
	return b.sandbox(ctx, sb)
}

func (b *opsBackend) DeleteSandbox(ctx context.Context, id string) error {
	// A sandbox whose replica is dead may still be deleted, here.
	if r, err := b.elsewhere(ctx, id, true); err != nil {
		return err
	} else if r != nil {
		return r.failed(r.DeleteSandbox(ctx, id))
	}
	return b.s.fleet.Delete(ctx, b.c, id)
}

func (b *opsBackend) AppStatus(ctx context.Context, id string) (api.AppStatus, error) {
	if v, ok, err := onHolder(ctx, b, id, func(r pmcp.Backend) (api.AppStatus, error) { return r.AppStatus(ctx, id) }); ok {
		return v, err
	}
	return b.s.ops.AppStatus(ctx, b.c, id)
}

func (b *opsBackend) Run(ctx context.Context, id string, start api.StreamStart, stdin []byte, out func(byte, []byte)) (api.StreamExit, error) {
	if v, ok, err := onHolder(ctx, b, id, func(r pmcp.Backend) (api.StreamExit, error) { return r.Run(ctx, id, start, stdin, out) }); ok {
		return v, err
	}
	gate, err := b.s.ops.OpenStream(ctx, b.c, id)
	if err != nil {
		return api.StreamExit{}, err
	}
	sess, exit, err := gate.Start(ctx, start)
	if err != nil {
		return api.StreamExit{}, err
	}
	if exit != nil {
		return *exit, nil
	}
	defer sess.Close()
	if len(stdin) > 0 {
		if err := sess.Write(stdin); err != nil {
			sess.Kill()
			return api.StreamExit{}, err
		}
	}
	if err := sess.CloseInput(); err != nil {
		sess.Kill()
		return api.StreamExit{}, err
	}
	for {
		// Recv ends with ctx (the tool's timeout, or the client gone), killing the command.
		stream, data, exit, err := sess.Recv()
		if err != nil {
			return api.StreamExit{}, err
		}
		if exit != nil {
			return *exit, nil
		}
		out(stream, data)
	}
}

func (b *opsBackend) ListFiles(ctx context.Context, id, dir string) ([]api.FileInfo, error) {
	if v, ok, err := onHolder(ctx, b, id, func(r pmcp.Backend) ([]api.FileInfo, error) { return r.ListFiles(ctx, id, dir) }); ok {
		return v, err
	}
	list, err := b.s.ops.ListFiles(ctx, b.c, id, dir)
	return list.Entries, err
}

// errEnough stops a download once a tool has what it can return.
var errEnough = errors.New("enough read")

// capped keeps max bytes and one more, to tell that the content goes on.
type capped struct {
	buf []byte
	max int64
}

func (w *capped) Write(p []byte) (int, error) {
	if room := w.max + 1 - int64(len(w.buf)); int64(len(p)) > room {
		w.buf = append(w.buf, p[:room]...)
		return int(room), errEnough
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

func (b *opsBackend) ReadFile(ctx context.Context, id, p string, max int64) ([]byte, bool, error) {
	type read struct {
		data []byte
		more bool
	}
	if v, ok, err := onHolder(ctx, b, id, func(r pmcp.Backend) (read, error) {
		data, more, err := r.ReadFile(ctx, id, p, max)
		return read{data, more}, err
	}); ok {
		return v.data, v.more, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the sandbox's stream when the tool stopped reading early
	d, err := b.s.ops.ReadFile(ctx, b.c, id, p)
	if err != nil {
		return nil, false, err
	}
	w := &capped{max: max}
	if _, err := d.WriteTo(w); err != nil && !errors.Is(err, errEnough) {
		return nil, false, fmt.Errorf("reading %s: %w", p, err)
	}
	if int64(len(w.buf)) > max {
		return w.buf[:max], true, nil
	}
	return w.buf, false, nil
}

func (b *opsBackend) WriteFile(ctx context.Context, id, p string, data []byte, mode fs.FileMode) (api.FileInfo, error) {
	if v, ok, err := onHolder(ctx, b, id, func(r pmcp.Backend) (api.FileInfo, error) { return r.WriteFile(ctx, id, p, data, mode) }); ok {
		return v, err
	}
	return b.s.ops.WriteFile(ctx, b.c, id, sandboxops.WriteRequest{Path: p, Mode: uint32(mode.Perm()), Size: int64(len(data))}, bytes.NewReader(data))
}

func (b *opsBackend) Move(ctx context.Context, id string, req api.FileMoveRequest) (api.FileInfo, error) {
	if v, ok, err := onHolder(ctx, b, id, func(r pmcp.Backend) (api.FileInfo, error) { return r.Move(ctx, id, req) }); ok {
		return v, err
	}
	return b.s.ops.Move(ctx, b.c, id, req)
}

func (b *opsBackend) Remove(ctx context.Context, id, p string, recursive bool) error {
	if _, ok, err := onHolder(ctx, b, id, func(r pmcp.Backend) (struct{}, error) { return struct{}{}, r.Remove(ctx, id, p, recursive) }); ok {
		return err
	}
	return b.s.ops.Remove(ctx, b.c, id, p, recursive)
}

func (b *opsBackend) History(ctx context.Context, id string) (api.History, error) {
	if v, ok, err := onHolder(ctx, b, id, func(r pmcp.Backend) (api.History, error) { return r.History(ctx, id) }); ok {
		return v, err
	}
	return b.s.ops.History(ctx, b.c, id)
}

func (b *opsBackend) Checkpoint(ctx context.Context, id, message string) (api.CheckpointResult, error) {
	if v, ok, err := onHolder(ctx, b, id, func(r pmcp.Backend) (api.CheckpointResult, error) { return r.Checkpoint(ctx, id, message) }); ok {
		return v, err
	}
	return b.s.ops.Checkpoint(ctx, b.c, id, api.CheckpointRequest{Message: message})
}

func (b *opsBackend) Undo(ctx context.Context, id string) (api.RestoreResult, error) {
	if v, ok, err := onHolder(ctx, b, id, func(r pmcp.Backend) (api.RestoreResult, error) { return r.Undo(ctx, id) }); ok {
		return v, err
	}
	return b.s.ops.Undo(ctx, b.c, id)
}

func (b *opsBackend) Redo(ctx context.Context, id string) (api.RestoreResult, error) {
	if v, ok, err := onHolder(ctx, b, id, func(r pmcp.Backend) (api.RestoreResult, error) { return r.Redo(ctx, id) }); ok {
		return v, err
	}
	return b.s.ops.Redo(ctx, b.c, id)
}

func (b *opsBackend) Restore(ctx context.Context, id, checkpoint string) (api.RestoreResult, error) {
	if v, ok, err := onHolder(ctx, b, id, func(r pmcp.Backend) (api.RestoreResult, error) { return r.Restore(ctx, id, checkpoint) }); ok {
		return v, err
	}
	return b.s.ops.Restore(ctx, b.c, id, api.RestoreRequest{Checkpoint: checkpoint})
}

// recordMCPToolCall records an MCP tool call that a client served itself (`paddock mcp`,
// over stdio) as the caller's mcp.tool_call event. Who called is the credentials', never
// the body's; the sandbox must be the caller's.
func (s *Server) recordMCPToolCall(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	var call api.MCPToolCall
	if err := api.DecodeJSON(w, r, &call, 4<<10); err != nil {
		return err
	}
	if !slices.Contains(pmcp.ToolNames(), call.Tool) {
		return fmt.Errorf("field tool: %q is not one of the MCP server's tools (%s): %w",
			errdefs.Clip(call.Tool, 64), strings.Join(pmcp.ToolNames(), ", "), errdefs.ErrInvalidArgument)
	}
	if call.Error != "" && !api.IsCode(call.Error) {
		return fmt.Errorf("field error: %q is not one of the API's error codes: %w", errdefs.Clip(call.Error, 64), errdefs.ErrInvalidArgument)
	}
	detail := map[string]any{"tool": call.Tool, "transport": "stdio"}
	if call.Sandbox != "" {
		if !runner.ValidID(call.Sandbox) {
			return fmt.Errorf("field sandbox: %q is not a sandbox ID (sb- and 10 characters of a-z2-7): %w", errdefs.Clip(call.Sandbox, 64), errdefs.ErrInvalidArgument)
		}
		if _, err := s.fleet.Get(r.Context(), c, call.Sandbox); err != nil {
			return err
		}
		detail["sandbox"] = call.Sandbox
	}
	if call.Error != "" {
		detail["error"] = call.Error
	}
	s.ops.Event(r.Context(), c.UserID, "mcp.tool_call", detail)
	w.WriteHeader(http.StatusNoContent)
	return nil
}
