// Package agentclient is the control plane's typed client of a sandbox's agent: one place
// for the calls' deadlines, their error mapping (errdefs.FromGRPC) and the channel's
// lifetime. Callers above it (package sandboxops, the fleet, the bench) never see a gRPC
// connection; the runner keeps the channel itself for its tunnels.
//
// Reconnection is the channel's: gRPC dials the agent again after a transient break, and a
// call made while it cannot answers errdefs.ErrUnavailable. Capability tokens travel in the
// requests' own fields, where the agent checks them.
package agentclient

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"

	"github.com/paddockhq/paddock/internal/errdefs"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// ShortCall bounds a call that only asks the agent something or changes one thing (info,
// app status, a file's stat, a mkdir), when its caller set no deadline: a stuck agent
// must not hold a request for ever.
const ShortCall = time.Minute

// Client calls one sandbox's agent. It is safe for concurrent use.
type Client struct {
	conn    *grpc.ClientConn
	agent   pb.AgentClient
	process pb.ProcessClient
	files   pb.FilesClient
	history pb.HistoryClient
}

// New is a client over conn, the channel to a sandbox's agent; Close closes conn.
func New(conn *grpc.ClientConn) *Client {
	return &Client{
		conn: conn, agent: pb.NewAgentClient(conn), process: pb.NewProcessClient(conn),
		files: pb.NewFilesClient(conn), history: pb.NewHistoryClient(conn),
	}
}

// Close closes the channel: calls in flight fail, and the sandbox keeps running.
func (c *Client) Close() error { return c.conn.Close() }

// The generated stubs, for callers that drive a stream themselves (an interactive
// session's input, the bench) or tests. Their errors are gRPC's: map them with Err.

// Process is the agent's Process service.
func (c *Client) Process() pb.ProcessClient { return c.process }

// Files is the agent's Files service.
func (c *Client) Files() pb.FilesClient { return c.files }

// History is the agent's History service.
func (c *Client) History() pb.HistoryClient { return c.history }

// Agent is the agent's Agent service (info, app status).
func (c *Client) Agent() pb.AgentClient { return c.agent }

// Err maps an error of the agent's channel to the taxonomy; io.EOF, the end of a stream,
// stays itself.
func Err(err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return err
	}
	return errdefs.FromGRPC(err)
}

// short gives ctx the ShortCall deadline when it has none.
func short(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, ShortCall)
}

// unary makes one call under ctx and maps its error.
func unary[Req, Res any](ctx context.Context, call func(context.Context, *Req, ...grpc.CallOption) (*Res, error), req *Req) (*Res, error) {
	res, err := call(ctx, req)
	if err != nil {
		return nil, errdefs.FromGRPC(err)
	}
	return res, nil
}

// shortUnary is unary under the ShortCall deadline when ctx has none.
func shortUnary[Req, Res any](ctx context.Context, call func(context.Context, *Req, ...grpc.CallOption) (*Res, error), req *Req) (*Res, error) {
	ctx, cancel := short(ctx)
	defer cancel()
	return unary(ctx, call, req)
}

// Info is the agent's version and what it serves.
func (c *Client) Info(ctx context.Context) (*pb.InfoResponse, error) {
	return shortUnary(ctx, c.agent.Info, &pb.InfoRequest{})
}

// App is the state of the sandbox's supervised app.
func (c *Client) App(ctx context.Context) (*pb.AppStatus, error) {
	return shortUnary(ctx, c.agent.App, &pb.AppRequest{})
}

// RestartApp starts the sandbox's supervised app again now.
func (c *Client) RestartApp(ctx context.Context) (*pb.AppStatus, error) {
	return shortUnary(ctx, c.agent.RestartApp, &pb.RestartAppRequest{})
}

// Execute runs a command to its end. Its deadline is the caller's: the agent enforces the
// command's own timeout.
func (c *Client) Execute(ctx context.Context, req *pb.ExecuteRequest) (*pb.ExecuteResponse, error) {
	// Called directly, not through unary: the exec path allocates nothing of its own.
	res, err := c.process.Execute(ctx, req)
	if err != nil {
		return nil, errdefs.FromGRPC(err)
	}
	return res, nil
}

// Start starts an interactive session; its events (the first says it started) come on
// the stream until it exits.
func (c *Client) Start(ctx context.Context, req *pb.StartRequest) (*Stream[pb.ProcessEvent], error) {
	s, err := c.process.Start(ctx, req)
	if err != nil {
		return nil, errdefs.FromGRPC(err)
	}
	return &Stream[pb.ProcessEvent]{s: s}, nil
}

// Attach streams a running session's events, replaying its output from offset.
func (c *Client) Attach(ctx context.Context, session string, offset uint64) (*Stream[pb.ProcessEvent], error) {
	s, err := c.process.Attach(ctx, &pb.AttachRequest{SessionId: session, Offset: offset})
	if err != nil {
		return nil, errdefs.FromGRPC(err)
	}
	return &Stream[pb.ProcessEvent]{s: s}, nil
}

// Signal sends sig to a session's processes.
func (c *Client) Signal(ctx context.Context, session string, sig int32) error {
	_, err := shortUnary(ctx, c.process.SendSignal, &pb.SendSignalRequest{SessionId: session, Signal: sig})
	return err
}

// WriteStdin writes to a session's standard input; closeIn closes it after data.
func (c *Client) WriteStdin(ctx context.Context, session string, data []byte, closeIn bool) error {
	// Not bounded: a command that does not read its input holds the write, as a pipe would.
	_, err := unary(ctx, c.process.WriteStdin, &pb.WriteStdinRequest{SessionId: session, Data: data, Close: closeIn})
	return err
}

// Resize sets a session's terminal size.
func (c *Client) Resize(ctx context.Context, session string, rows, cols uint32) error {
	_, err := shortUnary(ctx, c.process.ResizeTTY, &pb.ResizeTTYRequest{SessionId: session, Size: &pb.TTYSize{Rows: rows, Cols: cols}})
	return err
}

// Stat describes one path in the workspace.
func (c *Client) Stat(ctx context.Context, req *pb.StatRequest) (*pb.FileInfo, error) {
	return shortUnary(ctx, c.files.Stat, req)
}

// List lists a directory of the workspace.
func (c *Client) List(ctx context.Context, req *pb.ListFilesRequest) (*pb.ListFilesResponse, error) {
	return shortUnary(ctx, c.files.List, req)
}

// Mkdir makes a directory.
func (c *Client) Mkdir(ctx context.Context, req *pb.MkdirRequest) (*pb.FileInfo, error) {
	return shortUnary(ctx, c.files.Mkdir, req)
}

// Move renames a file or directory.
func (c *Client) Move(ctx context.Context, req *pb.MoveRequest) (*pb.FileInfo, error) {
	return shortUnary(ctx, c.files.Move, req)
}

// Remove deletes a file or directory. A recursive removal may take long: its deadline is
// the caller's.
func (c *Client) Remove(ctx context.Context, req *pb.RemoveRequest) error {
	_, err := unary(ctx, c.files.Remove, req)
	return err
}

// Read streams a file's content.
func (c *Client) Read(ctx context.Context, req *pb.ReadRequest) (*Stream[pb.FileChunk], error) {
	s, err := c.files.Read(ctx, req)
	if err != nil {
		return nil, errdefs.FromGRPC(err)
	}
	return &Stream[pb.FileChunk]{s: s}, nil
}

// Write streams a file's content; the first message names the file.
func (c *Client) Write(ctx context.Context) (*Upload[pb.WriteRequest, pb.FileInfo], error) {
	s, err := c.files.Write(ctx)
	if err != nil {
		return nil, errdefs.FromGRPC(err)
	}
	return &Upload[pb.WriteRequest, pb.FileInfo]{s: s}, nil
}

// HistoryList is the workspace's checkpoints.
func (c *Client) HistoryList(ctx context.Context) (*pb.HistoryListResponse, error) {
	return unary(ctx, c.history.List, &pb.HistoryListRequest{})
}

// Checkpoint records the workspace as it is now.
func (c *Client) Checkpoint(ctx context.Context, message string) (*pb.CheckpointResponse, error) {
	return unary(ctx, c.history.Checkpoint, &pb.CheckpointRequest{Message: message})
}

// Undo restores the checkpoint before the current one.
func (c *Client) Undo(ctx context.Context) (*pb.RestoreResponse, error) {
	return unary(ctx, c.history.Undo, &pb.UndoRequest{})
}

// Redo restores the checkpoint an undo left.
func (c *Client) Redo(ctx context.Context) (*pb.RestoreResponse, error) {
	return unary(ctx, c.history.Redo, &pb.RedoRequest{})
}

// Restore restores a checkpoint by its ID.
func (c *Client) Restore(ctx context.Context, checkpoint string) (*pb.RestoreResponse, error) {
	return unary(ctx, c.history.Restore, &pb.RestoreRequest{Checkpoint: checkpoint})
}

// Diff lists the paths that differ between two checkpoints ("" from: the current one).
func (c *Client) Diff(ctx context.Context, from, to string) (*pb.DiffResponse, error) {
	return unary(ctx, c.history.Diff, &pb.DiffRequest{From: from, To: to})
}

// DiffLines is Diff with a unified diff of each file's lines, each cut at about maxBytes.
func (c *Client) DiffLines(ctx context.Context, from, to string, maxBytes int32) (*pb.DiffResponse, error) {
	return unary(ctx, c.history.Diff, &pb.DiffRequest{From: from, To: to, Lines: true, MaxDiffBytes: maxBytes})
}

// Begin opens a transaction.
func (c *Client) Begin(ctx context.Context, message string) (*pb.BeginResponse, error) {
	return unary(ctx, c.history.Begin, &pb.BeginRequest{Message: message})
}

// Commit ends the open transaction with a checkpoint.
func (c *Client) Commit(ctx context.Context) (*pb.CommitResponse, error) {
	return unary(ctx, c.history.Commit, &pb.CommitRequest{})
}

// Rollback ends the open transaction, restoring its base.
func (c *Client) Rollback(ctx context.Context) (*pb.RollbackResponse, error) {
	return unary(ctx, c.history.Rollback, &pb.RollbackRequest{})
}

// Export streams the history as one file.
func (c *Client) Export(ctx context.Context) (*Stream[pb.ExportChunk], error) {
	s, err := c.history.Export(ctx, &pb.ExportRequest{})
	if err != nil {
		return nil, errdefs.FromGRPC(err)
	}
	return &Stream[pb.ExportChunk]{s: s}, nil
}

// Import streams an export to replace the history.
func (c *Client) Import(ctx context.Context) (*Upload[pb.ImportChunk, pb.RestoreResponse], error) {
	s, err := c.history.Import(ctx)
	if err != nil {
		return nil, errdefs.FromGRPC(err)
	}
	return &Upload[pb.ImportChunk, pb.RestoreResponse]{s: s}, nil
}

// Objects lists the history's store: its index, then its blobs.
func (c *Client) Objects(ctx context.Context) (*Stream[pb.ObjectsChunk], error) {
	s, err := c.history.Objects(ctx, &pb.ObjectsRequest{})
	if err != nil {
		return nil, errdefs.FromGRPC(err)
	}
	return &Stream[pb.ObjectsChunk]{s: s}, nil
}

// ReadObjects streams the blobs named, as the store holds them (unchecked).
func (c *Client) ReadObjects(ctx context.Context, sums []string) (*Stream[pb.ObjectChunk], error) {
	s, err := c.history.ReadObjects(ctx, &pb.ReadObjectsRequest{Sums: sums})
	if err != nil {
		return nil, errdefs.FromGRPC(err)
	}
	return &Stream[pb.ObjectChunk]{s: s}, nil
}

// Events streams the history's events after the cursor in req.
func (c *Client) Events(ctx context.Context, req *pb.HistoryEventsRequest) (*Stream[pb.HistoryEvent], error) {
	s, err := c.history.Events(ctx, req)
	if err != nil {
		return nil, errdefs.FromGRPC(err)
	}
	return &Stream[pb.HistoryEvent]{s: s}, nil
}

// Stream is a stream from the agent whose errors are in the taxonomy; it ends with io.EOF.
type Stream[T any] struct{ s grpc.ServerStreamingClient[T] }

// Recv is the next message, or io.EOF at the end.
func (s *Stream[T]) Recv() (*T, error) {
	m, err := s.s.Recv()
	return m, Err(err)
}

// Upload is a stream to the agent, answered once at its end.
type Upload[Req, Res any] struct {
	s grpc.ClientStreamingClient[Req, Res]
}

// Send sends one message; an error means the agent stopped taking them, and CloseAndRecv
// says why.
func (u *Upload[Req, Res]) Send(m *Req) error { return Err(u.s.Send(m)) }

// CloseAndRecv ends the stream and returns the agent's answer.
func (u *Upload[Req, Res]) CloseAndRecv() (*Res, error) {
	res, err := u.s.CloseAndRecv()
	if err != nil {
		return nil, errdefs.FromGRPC(err)
	}
	return res, nil
}
