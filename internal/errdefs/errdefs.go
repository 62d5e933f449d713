// Package errdefs is paddock's one error taxonomy. Code anywhere wraps these sentinels with
// context (fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)); the edges map them once:
// to a gRPC status in the agent, an exit code in the CLI, an HTTP status in the control plane.
//
// Messages built on these errors are shown to users: they say what happened and what to do,
// and never carry a secret or internal state.
package errdefs

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var (
	ErrInvalidArgument    = errors.New("invalid argument")
	ErrNotFound           = errors.New("not found")
	ErrAlreadyExists      = errors.New("already exists")
	ErrPermissionDenied   = errors.New("permission denied")
	ErrUnavailable        = errors.New("unavailable")
	ErrLimitExceeded      = errors.New("limit exceeded")
	ErrFailedPrecondition = errors.New("failed precondition")
	ErrDeadlineExceeded   = errors.New("deadline exceeded")
	// ErrUnauthenticated means the caller did not prove who it is (HTTP 401), as opposed
	// to ErrPermissionDenied: known, and not allowed (HTTP 403).
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrDataLoss means stored data is unrecoverably corrupt (a ciphertext that no longer
	// authenticates): retrying will not help, restoring a backup may.
	ErrDataLoss = errors.New("data loss")
	// ErrStale means a conditional change was refused because what it was based on has
	// changed since (an If-Match whose ETag the file no longer has: HTTP 412).
	ErrStale = errors.New("stale")
)

var codeOf = []struct {
	err  error
	code codes.Code
}{
	{ErrInvalidArgument, codes.InvalidArgument},
	{ErrNotFound, codes.NotFound},
	{ErrAlreadyExists, codes.AlreadyExists},
	{ErrPermissionDenied, codes.PermissionDenied},
	{ErrUnavailable, codes.Unavailable},
	{ErrLimitExceeded, codes.ResourceExhausted},
	{ErrFailedPrecondition, codes.FailedPrecondition},
	{ErrDeadlineExceeded, codes.DeadlineExceeded},
	{ErrUnauthenticated, codes.Unauthenticated},
	{ErrDataLoss, codes.DataLoss},
	{ErrStale, codes.Aborted},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
	{context.Canceled, codes.Canceled},
}

// GRPCCode returns the gRPC code for err's place in the taxonomy; codes.Unknown when it has none.
func GRPCCode(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	for _, c := range codeOf {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return codes.Unknown
}

// ToGRPC turns err into a gRPC status error carrying err's message and taxonomy code.
func ToGRPC(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(GRPCCode(err), err.Error())
}

// FromGRPC turns a gRPC status error back into an error that matches the taxonomy with
// errors.Is, keeping the remote message.
func FromGRPC(err error) error {
	s, ok := status.FromError(err)
	if !ok || s.Code() == codes.OK {
		return err
	}
	if s.Code() == codes.Canceled && strings.Contains(s.Message(), "client connection is closing") {
		// The channel to the sandbox was closed under the call: the sandbox was stopped
		// or removed meanwhile, which is no fault of the server's.
		return &remoteError{msg: "the sandbox stopped while the call ran (its agent's channel closed)", kind: ErrUnavailable}
	}
	for _, c := range codeOf {
		if c.code == s.Code() {
			return &remoteError{msg: s.Message(), kind: c.err}
		}
	}
	return err
}

type remoteError struct {
	msg  string
	kind error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.kind }

// Clip bounds a client-, sandbox- or config-supplied string to max bytes before it goes
// into a message or a log, and keeps the cut valid UTF-8: an attacker chooses its
// length and its bytes.
func Clip(s string, max int) string {
	if len(s) > max {
		return strings.ToValidUTF8(s[:max], "") + "…"
	}
	return s
}
