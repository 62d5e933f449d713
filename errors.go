package paddock

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// The kinds of error, to test with errors.Is. Every error this package returns that the
// server answered (an *Error) matches exactly one of them.
var (
	// ErrInvalidArgument: a bad request (a 400, 405, 413 or 415); the message names what
	// was wrong.
	ErrInvalidArgument = errdefs.ErrInvalidArgument
	// ErrUnauthenticated: no token, or one that is expired or revoked (401).
	ErrUnauthenticated = errdefs.ErrUnauthenticated
	// ErrPermissionDenied: known, and not allowed: a policy's rule (the message names it),
	// a capability token's bounds, a token's scope, someone else's resource (403).
	ErrPermissionDenied = errdefs.ErrPermissionDenied
	// ErrNotFound: no such sandbox, file, checkpoint, token, secret (404).
	ErrNotFound = errdefs.ErrNotFound
	// ErrAlreadyExists: something is already there (409).
	ErrAlreadyExists = errdefs.ErrAlreadyExists
	// ErrFailedPrecondition: a conflict with the resource's state, like a sandbox that
	// is not running or a transaction already open (409).
	ErrFailedPrecondition = errdefs.ErrFailedPrecondition
	// ErrLimitExceeded: a limit or quota was hit (429); Error.Limit names a sandbox limit
	// when one was.
	ErrLimitExceeded = errdefs.ErrLimitExceeded
	// ErrUnavailable: the server cannot be reached, or a sandbox's agent cannot (503).
	ErrUnavailable = errdefs.ErrUnavailable
	// ErrDeadlineExceeded: the server gave up waiting (504).
	ErrDeadlineExceeded = errdefs.ErrDeadlineExceeded
	// ErrDataLoss: stored data is corrupt; retrying will not help.
	ErrDataLoss = errdefs.ErrDataLoss
)

// Limits an Error, an ExecResult or a StreamExit names.
const (
	LimitTimeout  = "timeout"
	LimitMemory   = "memory"
	LimitPids     = "pids"
	LimitFileSize = "file_size"
	LimitDisk     = "disk"
)

// Error is an error the server answered with. It unwraps to the sentinel of its code, so
// that errors.Is(err, paddock.ErrNotFound) works; Error() is the server's message.
type Error struct {
	// Status is the HTTP status (0 for an error that ended a stream); Code the API's
	// error code (api/openapi.yaml).
	Status  int
	Code    string
	Message string
	// Limit names the limit that was hit (LimitDisk, …), on some ErrLimitExceeded errors.
	Limit string
	kind  error
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the sentinel of e's code (nil for an internal error).
func (e *Error) Unwrap() error { return e.kind }

// kindOf maps the API's error codes back to the taxonomy.
var kindOf = map[string]error{
	api.CodeInvalidArgument:    errdefs.ErrInvalidArgument,
	api.CodeTooLarge:           errdefs.ErrInvalidArgument,
	api.CodeUnsupportedMedia:   errdefs.ErrInvalidArgument,
	api.CodeMethodNotAllowed:   errdefs.ErrInvalidArgument,
	api.CodeUnauthenticated:    errdefs.ErrUnauthenticated,
	api.CodePermissionDenied:   errdefs.ErrPermissionDenied,
	api.CodeNotFound:           errdefs.ErrNotFound,
	api.CodeAlreadyExists:      errdefs.ErrAlreadyExists,
	api.CodeFailedPrecondition: errdefs.ErrFailedPrecondition,
	api.CodeLimitExceeded:      errdefs.ErrLimitExceeded,
	api.CodeUnavailable:        errdefs.ErrUnavailable,
	api.CodeDeadlineExceeded:   errdefs.ErrDeadlineExceeded,
	api.CodeDataLoss:           errdefs.ErrDataLoss,
}

// kindOfStatus classifies an error response that is not in the API's shape (a proxy in
// front of the server answered, say).
func kindOfStatus(status int) (string, error) {
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusMethodNotAllowed:
		return api.CodeInvalidArgument, errdefs.ErrInvalidArgument
	case http.StatusUnauthorized:
		return api.CodeUnauthenticated, errdefs.ErrUnauthenticated
	case http.StatusForbidden:
		return api.CodePermissionDenied, errdefs.ErrPermissionDenied
	case http.StatusNotFound:
		return api.CodeNotFound, errdefs.ErrNotFound
	case http.StatusConflict:
		return api.CodeFailedPrecondition, errdefs.ErrFailedPrecondition
	case http.StatusTooManyRequests:
		return api.CodeLimitExceeded, errdefs.ErrLimitExceeded
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return api.CodeUnavailable, errdefs.ErrUnavailable
	case http.StatusGatewayTimeout:
		return api.CodeDeadlineExceeded, errdefs.ErrDeadlineExceeded
	}
	return api.CodeInternal, nil
}

// errorOf reads an error response (at most 64 KiB of it).
func errorOf(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var body api.Error
	if json.Unmarshal(data, &body) == nil && body.Error.Code != "" && body.Error.Message != "" {
		return &Error{Status: resp.StatusCode, Code: body.Error.Code, Message: body.Error.Message, Limit: body.Error.Limit, kind: kindOf[body.Error.Code]}
	}
	code, kind := kindOfStatus(resp.StatusCode)
	return &Error{Status: resp.StatusCode, Code: code, kind: kind,
		Message: fmt.Sprintf("%s %s: the server answered %s", resp.Request.Method, resp.Request.URL.Path, resp.Status)}
}
