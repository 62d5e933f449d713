package capability

import (
	"fmt"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Reason says in one stable word why a token or a request was refused: for the audit log
// and for callers that branch on it. The message of the [Error] says it to people.
type Reason string

const (
	// ReasonMalformed: the token does not decode (errdefs.ErrInvalidArgument).
	ReasonMalformed Reason = "malformed"
	// ReasonBadRequest: the request is not well formed — an unknown action, a relative
	// path, a wildcard where a concrete resource is needed (errdefs.ErrInvalidArgument).
	ReasonBadRequest Reason = "bad_request"
	// ReasonUnknownKey: the token names a root key the verifier does not hold.
	ReasonUnknownKey Reason = "unknown_key"
	// ReasonBadSignature: the token was not minted by a holder of the key, or was changed
	// since (a field, a caveat removed, reordered or edited).
	ReasonBadSignature Reason = "bad_signature"
	// ReasonAudience: the token is for the other verifier (the agent, or the control plane).
	ReasonAudience Reason = "audience"
	// ReasonSubject: the token was minted for another subject than the request's.
	ReasonSubject Reason = "subject"
	// ReasonRevoked: the token's ID is on the revocation list.
	ReasonRevoked Reason = "revoked"
	// ReasonRevocationCheck: the revocation list could not be asked; the token is refused
	// rather than let through (errdefs.ErrUnavailable, and the list's own error).
	ReasonRevocationCheck Reason = "revocation_check"
	// ReasonNotYetValid: the request is before a not_before.
	ReasonNotYetValid Reason = "not_yet_valid"
	// ReasonExpired: the request is at or after an expiry.
	ReasonExpired Reason = "expired"
	// ReasonResource: the requested resource is outside a granted one.
	ReasonResource Reason = "resource"
	// ReasonAction: the requested action is not among the allowed ones.
	ReasonAction Reason = "action"
	// ReasonSize: the request's size is over a max_size.
	ReasonSize Reason = "size"
	// ReasonExtension: the requested file's name does not end in an allowed extension.
	ReasonExtension Reason = "extension"
)

// Error is why Verify refused: a [Reason], where in the token it was decided, and a
// message that names the values involved (never a key or a signature). It matches
// errdefs.ErrInvalidArgument (a malformed token or request), errdefs.ErrUnavailable (the
// revocation list failed) or errdefs.ErrPermissionDenied (everything else) with errors.Is.
type Error struct {
	// Reason is the refusal's kind.
	Reason Reason
	// Caveat says which part of the token refused a request: 0 for the claims it was
	// minted with, n for its n-th caveat; -1 when the refusal is about the token as a whole.
	Caveat int

	msg   string
	kind  error // an errdefs sentinel
	cause error // an underlying error, such as the revocation list's
}

func (e *Error) Error() string { return e.msg + ": " + e.kind.Error() }

// Unwrap lets errors.Is find the errdefs sentinel, and the underlying error if any.
func (e *Error) Unwrap() []error {
	if e.cause != nil {
		return []error{e.kind, e.cause}
	}
	return []error{e.kind}
}

func malformed(format string, args ...any) *Error {
	return &Error{Reason: ReasonMalformed, Caveat: -1, kind: errdefs.ErrInvalidArgument,
		msg: "malformed capability token: " + fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) *Error {
	return &Error{Reason: ReasonBadRequest, Caveat: -1, kind: errdefs.ErrInvalidArgument,
		msg: "capability request: " + fmt.Sprintf(format, args...)}
}

// denied is a refusal of token id ("" before the token is authenticated: its ID is then
// only a claim); caveat is -1 for the token as a whole.
func denied(r Reason, id string, caveat int, format string, args ...any) *Error {
	msg := "capability token: "
	if id != "" {
		msg = "capability " + id + ": "
	}
	if caveat > 0 {
		msg += fmt.Sprintf("caveat %d: ", caveat)
	}
	return &Error{Reason: r, Caveat: caveat, kind: errdefs.ErrPermissionDenied, msg: msg + fmt.Sprintf(format, args...)}
}
