package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/coder/websocket"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/sandboxops"
)

// maxExecBody bounds an exec request: the command line plus its whole stdin.
const maxExecBody = 8 << 20

func (s *Server) exec(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	var req api.ExecRequest
	if err := api.DecodeJSON(w, r, &req, maxExecBody); err != nil {
		return err
	}
	out, err := s.ops.Exec(r.Context(), c, r.PathValue("id"), req)
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, out)
	return nil
}

// execStream serves the exec stream and the interactive shell over a WebSocket (the
// protocol is in internal/api/stream.go). Origin is checked by websocket.Accept: a page of
// another origin cannot open a shell with the user's cookie.
func (s *Server) execStream(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	gate, err := s.ops.OpenStream(r.Context(), c, r.PathValue("id"))
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
	// The command is known only now, after the upgrade: a refusal is an exit that says
	// why, and a close with its own code. Nothing reached the sandbox.
	sess, exit, err := gate.Start(ctx, start)
	switch {
	case err != nil:
		s.refuseStream(ctx, ws, err.Error())
		return errResponded
	case exit != nil:
		s.endStream(ctx, ws, *exit)
		return errResponded
	}
	defer sess.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go pumpInput(ctx, ws, sess)
	for {
		stream, data, exit, err := sess.Recv()
		switch {
		case err != nil:
			if ctx.Err() == nil {
				ws.Close(websocket.StatusInternalError, truncateReason(err.Error()))
			}
			return errResponded
		case exit != nil:
			s.endStream(ctx, ws, *exit)
			return errResponded
		}
		msg := make([]byte, 1+len(data))
		msg[0] = stream
		copy(msg[1:], data)
		if err := ws.Write(ctx, websocket.MessageBinary, msg); err != nil {
			sess.Kill()
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
	return start, sandboxops.CheckCommand(start.Argv, start.Env)
}

// pumpInput forwards the client's stdin and control messages to the session.
func pumpInput(ctx context.Context, ws *websocket.Conn, sess *sandboxops.Session) {
	for {
		typ, data, err := ws.Read(ctx)
		if err != nil {
			return
		}
		if typ == websocket.MessageBinary {
			if err := sess.Write(data); err != nil {
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
			_ = sess.Resize(ctl.Rows, ctl.Cols)
		case "signal":
			_ = sess.Signal(ctl.Signal)
		case "eof":
			_ = sess.CloseInput()
		}
	}
}

func (s *Server) endStream(ctx context.Context, ws *websocket.Conn, exit api.StreamExit) {
	b, _ := json.Marshal(exit)
	if err := ws.Write(ctx, websocket.MessageText, b); err == nil {
		ws.Close(websocket.StatusNormalClosure, "exited")
	}
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
