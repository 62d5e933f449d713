package api

import "time"

// The streaming exec and the interactive shell share one WebSocket protocol, at
// GET /api/v1/sandboxes/{id}/exec/stream (subprotocol StreamProtocol).
//
// Client → server:
//   - the first message, text: a StreamStart (JSON);
//   - binary messages: bytes for the command's stdin;
//   - text messages: a StreamControl (JSON): resize, signal, or eof (close stdin).
//
// A start with keep set, or an attach (StreamStart.Attach), gets a StreamStarted text
// message first; a kept session survives its connection and is reattached with its
// output replayed from the client's offset.
//
// Server → client:
//   - binary messages: the first byte says the stream (StreamStdout or StreamStderr; a
//     TTY session has only stdout), the rest are its bytes;
//   - one text message at the end: a StreamExit (JSON), then a normal close.
//
// A command that cannot start still ends with a StreamExit (code 126 or 127, Error set).
// Bad input before the start closes the connection with code 4400 and a reason. A start
// the sandbox's policy denies gets a StreamExit (code 126, Error naming the rule) and a
// close with code 4403: the command never reached the sandbox.

// StreamProtocol is the WebSocket subprotocol of the exec stream.
const StreamProtocol = "paddock.exec.v1"

// Stream bytes prefixing binary server messages.
const (
	StreamStdout byte = 1
	StreamStderr byte = 2
)

// CloseBadRequest closes an exec stream whose first message was not a valid StreamStart.
const CloseBadRequest = 4400

// ClosePermissionDenied closes an exec stream whose command the sandbox's policy denies.
const ClosePermissionDenied = 4403

// StreamStart starts the command of an exec stream.
type StreamStart struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env,omitempty"`
	Cwd  string   `json:"cwd,omitempty"`
	// TTY, when set, runs the command on a pseudo-terminal of that size.
	TTY *TTYSize `json:"tty,omitempty"`
	// Keep keeps the session running when the connection drops, for a client to
	// reattach to (a terminal tab that reconnects): the server sends a StreamStarted
	// first, and ends a kept session that no client attaches to for KeptIdle.
	Keep bool `json:"keep,omitempty"`
	// Attach, instead of Argv, reattaches to a kept session of the sandbox (its ID, from
	// StreamStarted), replaying its output from Offset: the bytes of output (without the
	// stream prefix) the client has shown. TTY, when set, resizes it.
	Attach string `json:"attach,omitempty"`
	Offset uint64 `json:"offset,omitempty"`
}

// StreamStarted is the first server message of a kept or attached stream.
type StreamStarted struct {
	Type      string `json:"type"` // "started"
	SessionID string `json:"session_id"`
}

// KeptIdle is how long a kept session runs with no client attached before it is killed.
const KeptIdle = 15 * time.Minute

// TTYSize is a terminal's size.
type TTYSize struct {
	Rows uint32 `json:"rows"`
	Cols uint32 `json:"cols"`
}

// StreamControl is a control message: Type is "resize" (Rows, Cols), "signal" (Signal,
// a number) or "eof".
type StreamControl struct {
	Type   string `json:"type"`
	Rows   uint32 `json:"rows,omitempty"`
	Cols   uint32 `json:"cols,omitempty"`
	Signal int    `json:"signal,omitempty"`
}

// StreamExit ends an exec stream.
type StreamExit struct {
	Type     string `json:"type"` // "exit"
	ExitCode int    `json:"exit_code"`
	Signal   int    `json:"signal,omitempty"`
	// Limit and Error are as in ExecResult.
	Limit string `json:"limit,omitempty"`
	Error string `json:"error,omitempty"`
}
