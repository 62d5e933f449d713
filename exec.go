package paddock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/coder/websocket"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// maxStreamMessage bounds one message from the server (a chunk of output).
const maxStreamMessage = 4 << 20

// ExecOption sets a field of a one-shot command's request.
type ExecOption func(*ExecRequest)

// WithStdin gives the command stdin (at most the server's exec limit, 5 MiB; stream a
// larger input with Stream, or copy files in with PutArchive).
func WithStdin(data []byte) ExecOption { return func(r *ExecRequest) { r.Stdin = data } }

// WithEnv adds environment variables (KEY=VALUE).
func WithEnv(env ...string) ExecOption { return func(r *ExecRequest) { r.Env = append(r.Env, env...) } }

// WithDir runs the command in dir (relative to the workspace, or absolute).
func WithDir(dir string) ExecOption { return func(r *ExecRequest) { r.Cwd = dir } }

// WithTimeout bounds how long the command may run; past it, the command is killed and
// the result names LimitTimeout.
func WithTimeout(d time.Duration) ExecOption {
	return func(r *ExecRequest) { r.TimeoutMS = d.Milliseconds() }
}

// Exec runs argv in the sandbox and returns how it ended and its whole output. A
// command that fails is not an error: see ExitCode, Signal and Limit in the result.
func (s *Sandbox) Exec(ctx context.Context, argv []string, opts ...ExecOption) (ExecResult, error) {
	req := ExecRequest{Argv: argv}
	for _, o := range opts {
		o(&req)
	}
	return s.Run(ctx, req)
}

// Run runs a one-shot command from the full request.
func (s *Sandbox) Run(ctx context.Context, req ExecRequest) (ExecResult, error) {
	var res ExecResult
	err := s.c.do(ctx, "POST", s.path("exec"), req, &res, http.StatusOK)
	return res, err
}

// Stream is a running command of the exec stream (a WebSocket): stdin goes in with
// Write, output and the exit status come out of Next (or Copy). Close it when done.
type Stream struct {
	ws *websocket.Conn
}

// Stream starts a command in the sandbox over the exec stream. With start.TTY set it
// runs on a terminal of that size (see PTY).
func (s *Sandbox) Stream(ctx context.Context, start StreamStart) (*Stream, error) {
	return s.c.stream(ctx, s.ID, start)
}

// PTY starts argv on a terminal of rows by cols: what it writes comes out of Next as
// stdout, keys go in with Write, and Resize follows the terminal's size.
func (s *Sandbox) PTY(ctx context.Context, argv []string, rows, cols uint32) (*Stream, error) {
	return s.Stream(ctx, StreamStart{Argv: argv, TTY: &TTYSize{Rows: rows, Cols: cols}})
}

func (c *Client) stream(ctx context.Context, id string, start api.StreamStart) (*Stream, error) {
	opts := &websocket.DialOptions{
		HTTPClient:   c.http,
		HTTPHeader:   http.Header{},
		Subprotocols: []string{api.StreamProtocol},
	}
	if c.token != "" {
		opts.HTTPHeader.Set("Authorization", "Bearer "+c.token)
	}
	ws, resp, err := websocket.Dial(ctx, c.base+sandboxPath(id, "exec", "stream"), opts)
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			if resp.Request == nil {
				resp.Request, _ = http.NewRequest("GET", sandboxPath(id, "exec", "stream"), nil)
			}
			return nil, errorOf(resp)
		}
		return nil, c.transportError(err)
	}
	ws.SetReadLimit(maxStreamMessage)
	data, err := json.Marshal(start)
	if err != nil {
		_ = ws.CloseNow()
		return nil, err
	}
	if err := ws.Write(ctx, websocket.MessageText, data); err != nil {
		_ = ws.CloseNow()
		return nil, streamError(err)
	}
	return &Stream{ws: ws}, nil
}

// Write sends p to the command's stdin.
func (s *Stream) Write(ctx context.Context, p []byte) error {
	return streamError(s.ws.Write(ctx, websocket.MessageBinary, p))
}

// CloseStdin closes the command's stdin (end of file).
func (s *Stream) CloseStdin(ctx context.Context) error {
	return s.control(ctx, api.StreamControl{Type: "eof"})
}

// Resize changes the size of the command's terminal.
func (s *Stream) Resize(ctx context.Context, rows, cols uint32) error {
	return s.control(ctx, api.StreamControl{Type: "resize", Rows: rows, Cols: cols})
}

// Signal sends signal n to the command.
func (s *Stream) Signal(ctx context.Context, n int) error {
	return s.control(ctx, api.StreamControl{Type: "signal", Signal: n})
}

func (s *Stream) control(ctx context.Context, ctl api.StreamControl) error {
	data, _ := json.Marshal(ctl)
	return streamError(s.ws.Write(ctx, websocket.MessageText, data))
}

// Which stream an Output's data is of.
const (
	Stdout byte = 1
	Stderr byte = 2
)

// Output is one message from the server: a chunk of output, or the exit status.
type Output struct {
	// Stream is Stdout or Stderr when Data is set.
	Stream byte
	Data   []byte
	// Exit is set on the last message.
	Exit *api.StreamExit
}

// Next reads the next message. After the one with Exit set, the stream is over.
func (s *Stream) Next(ctx context.Context) (Output, error) {
	for {
		typ, data, err := s.ws.Read(ctx)
		if err != nil {
			return Output{}, streamError(err)
		}
		if typ == websocket.MessageBinary {
			if len(data) == 0 {
				continue
			}
			return Output{Stream: data[0], Data: data[1:]}, nil
		}
		var exit api.StreamExit
		if err := json.Unmarshal(data, &exit); err != nil || exit.Type != "exit" {
			continue // a message this client does not know changes nothing
		}
		return Output{Exit: &exit}, nil
	}
}

// Copy writes the command's output to stdout and stderr until it exits, and returns its
// exit status.
func (s *Stream) Copy(ctx context.Context, stdout, stderr io.Writer) (StreamExit, error) {
	for {
		out, err := s.Next(ctx)
		if err != nil {
			return StreamExit{}, err
		}
		if out.Exit != nil {
			return *out.Exit, nil
		}
		w := stdout
		if out.Stream == api.StreamStderr {
			w = stderr
		}
		if _, err := w.Write(out.Data); err != nil {
			return StreamExit{}, fmt.Errorf("writing the command's output: %w", err)
		}
	}
}

// Close ends the stream; a command still running is killed.
func (s *Stream) Close() error {
	return s.ws.Close(websocket.StatusNormalClosure, "")
}

// streamError maps how the server closed the stream to the taxonomy.
func streamError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var ce websocket.CloseError
	if !errors.As(err, &ce) {
		return fmt.Errorf("exec stream: %v: %w", err, errdefs.ErrUnavailable)
	}
	reason := ce.Reason
	if reason == "" {
		reason = fmt.Sprintf("closed with code %d", int(ce.Code))
	}
	switch int(ce.Code) {
	case api.CloseBadRequest:
		return &Error{Code: api.CodeInvalidArgument, Message: reason, kind: errdefs.ErrInvalidArgument}
	case api.ClosePermissionDenied:
		return &Error{Code: api.CodePermissionDenied, Message: reason, kind: errdefs.ErrPermissionDenied}
	case api.CloseOwnerGone:
		return &Error{Code: api.CodeUnavailable, Message: "the sandbox stopped: " + reason, kind: errdefs.ErrUnavailable}
	}
	return &Error{Code: api.CodeUnavailable, Message: "exec stream ended: " + reason, kind: errdefs.ErrUnavailable}
}
