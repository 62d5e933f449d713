package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/sandboxops"
	"github.com/paddockhq/paddock/internal/wire"
)

// maxExecBody bounds an exec request: the command line plus its whole stdin.
const maxExecBody = 8 << 20

func (s *Server) exec(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	var req api.ExecRequest
	if err := api.DecodeJSON(w, r, &req, maxExecBody); err != nil {
		return err
	}
	var err error
	if req.Env, err = s.agentChoiceEnv(r.Context(), c, req.Argv, req.Env); err != nil {
		return err
	}
	defer s.fleet.Hold(r.PathValue("id"))()
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
	defer s.fleet.Hold(r.PathValue("id"))()
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{api.StreamProtocol}, OriginPatterns: s.cfg.TrustedOrigins})
	if err != nil {
		return errResponded // Accept wrote the response
	}
	defer ws.CloseNow()
	ws.SetReadLimit(1 << 20)
	ctx := r.Context()
	start, err := readStart(ctx, ws)
	if err == nil && start.Attach == "" {
		start.Env, err = s.agentChoiceEnv(ctx, c, start.Argv, start.Env)
	}
	if err != nil {
		ws.Close(api.CloseBadRequest, truncateReason(err.Error()))
		return errResponded
	}
	// The command is known only now, after the upgrade: a refusal is an exit that says
	// why, and a close with its own code. Nothing reached the sandbox.
	var sess *sandboxops.Session
	var exit *api.StreamExit
	if start.Attach != "" {
		sess, exit, err = gate.Attach(ctx, start)
	} else {
		sess, exit, err = gate.Start(ctx, start)
	}
	switch {
	case err != nil:
		s.refuseStream(ctx, ws, err.Error())
		return errResponded
	case exit != nil:
		s.endStream(ctx, ws, *exit)
		return errResponded
	}
	defer sess.Close()
	if sess.Kept() {
		b, _ := json.Marshal(api.StreamStarted{Type: "started", SessionID: sess.ID()})
		if err := ws.Write(ctx, websocket.MessageText, b); err != nil {
			sess.Leave()
			return errResponded
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		pumpInput(ctx, ws, sess)
		// The client went away (or the handler ended): stop relaying, which kills the
		// session unless it is kept.
		sess.Close()
	}()
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
			sess.Leave()
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
	if start.Attach != "" {
		switch {
		case len(start.Argv) > 0 || len(start.Env) > 0 || start.Cwd != "" || start.Keep:
			return start, fmt.Errorf("attach: give the session and offset only, no argv, env, cwd or keep: %w", errdefs.ErrInvalidArgument)
		case len(start.Attach) > 64 || strings.ContainsFunc(start.Attach, func(r rune) bool { return r <= ' ' || r > '~' }):
			return start, fmt.Errorf("attach: %q is no session ID: %w", errdefs.Clip(start.Attach, 64), errdefs.ErrInvalidArgument)
		case start.Attach == wire.MainSessionID:
			return start, fmt.Errorf("attach: the app's session is not a terminal; see GET …/app for its output: %w", errdefs.ErrInvalidArgument)
		}
		return start, nil
	}
	if start.Keep && start.TTY == nil {
		return start, fmt.Errorf("keep: only a terminal (tty) session is kept: %w", errdefs.ErrInvalidArgument)
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
