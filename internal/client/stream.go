package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/coder/websocket"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// maxStreamMessage bounds one message from the server (a chunk of output).
const maxStreamMessage = 4 << 20

// Stream is a running command of the exec stream (internal/api/stream.go): stdin goes
// in with Write, output and the exit status come out of Next.
type Stream struct {
	ws *websocket.Conn
}

// Stream starts a command in sandbox id over the WebSocket exec stream.
func (c *Client) Stream(ctx context.Context, id string, start api.StreamStart) (*Stream, error) {
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
		ws.CloseNow()
		return nil, err
	}
	if err := ws.Write(ctx, websocket.MessageText, data); err != nil {
		ws.CloseNow()
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

// Output is one message from the server: a chunk of output, or the exit status.
type Output struct {
	// Stream is api.StreamStdout or api.StreamStderr when Data is set.
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
func (s *Stream) Copy(ctx context.Context, stdout, stderr io.Writer) (api.StreamExit, error) {
	for {
		out, err := s.Next(ctx)
		if err != nil {
			return api.StreamExit{}, err
		}
		if out.Exit != nil {
			return *out.Exit, nil
		}
		w := stdout
		if out.Stream == api.StreamStderr {
			w = stderr
		}
		if _, err := w.Write(out.Data); err != nil {
			return api.StreamExit{}, fmt.Errorf("writing the command's output: %w", err)
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
