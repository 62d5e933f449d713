package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// MaxJSONBody caps JSON request bodies. Larger ones get 413.
const MaxJSONBody = 1 << 20

// ErrTooLarge is the error for a body over its cap.
var ErrTooLarge = errors.New("request body too large")

// ErrUnsupportedMedia is the error for a body that is not the content type asked for.
var ErrUnsupportedMedia = errors.New("unsupported media type")

// statusOf maps the error taxonomy to HTTP. Anything outside it is a 500 whose message
// is not shown.
var statusOf = []struct {
	err    error
	status int
	code   string
}{
	{ErrTooLarge, http.StatusRequestEntityTooLarge, CodeTooLarge},
	{ErrUnsupportedMedia, http.StatusUnsupportedMediaType, CodeUnsupportedMedia},
	{errdefs.ErrInvalidArgument, http.StatusBadRequest, CodeInvalidArgument},
	{errdefs.ErrUnauthenticated, http.StatusUnauthorized, CodeUnauthenticated},
	{errdefs.ErrPermissionDenied, http.StatusForbidden, CodePermissionDenied},
	{errdefs.ErrNotFound, http.StatusNotFound, CodeNotFound},
	{errdefs.ErrAlreadyExists, http.StatusConflict, CodeAlreadyExists},
	{errdefs.ErrFailedPrecondition, http.StatusConflict, CodeFailedPrecondition},
	{errdefs.ErrStale, http.StatusPreconditionFailed, CodeStale},
	{errdefs.ErrLimitExceeded, http.StatusTooManyRequests, CodeLimitExceeded},
	{errdefs.ErrUnavailable, http.StatusServiceUnavailable, CodeUnavailable},
	{errdefs.ErrDeadlineExceeded, http.StatusGatewayTimeout, CodeDeadlineExceeded},
	{errdefs.ErrDataLoss, http.StatusInternalServerError, CodeDataLoss},
}

// StatusOf returns the HTTP status and error code for err.
func StatusOf(err error) (int, string) {
	for _, s := range statusOf {
		if errors.Is(err, s.err) {
			return s.status, s.code
		}
	}
	return http.StatusInternalServerError, CodeInternal
}

// IsCode reports whether code is one of the API's error codes.
func IsCode(code string) bool {
	if code == CodeInternal || code == CodeMethodNotAllowed {
		return true
	}
	for _, s := range statusOf {
		if s.code == code {
			return true
		}
	}
	return false
}

// WriteError answers err in the API's error shape. Errors in the taxonomy show their
// message (they are written for users and carry no secret); any other error is logged
// and answered with a generic 500. ErrDataLoss is a 500 too, but keeps its message.
func WriteError(w http.ResponseWriter, log *slog.Logger, err error) {
	status, code := StatusOf(err)
	msg := err.Error()
	// The taxonomy's word that %w left at the end ("…: invalid argument") repeats what
	// the message already says; "not found" and "already exists" are kept, as they are
	// the message's point ("sandbox sb-…: not found").
	for _, s := range statusOf {
		if errors.Is(err, s.err) && s.err != errdefs.ErrNotFound && s.err != errdefs.ErrAlreadyExists { //nolint:errorlint // the table's own sentinels
			msg = strings.TrimSuffix(msg, ": "+s.err.Error())
		}
	}
	if status == http.StatusInternalServerError {
		if log != nil {
			log.Error("internal error", "err", err)
		}
		// Data loss keeps its message: it names what is lost (never its content) and
		// says what to do; any other 500 may carry internal state.
		if code == CodeInternal {
			msg = "internal error; the server log has the details"
		}
	}
	body := ErrorBody{Code: code, Message: msg}
	var le *LimitError
	if errors.As(err, &le) {
		body.Limit = le.Limit
	}
	WriteJSON(w, status, Error{Error: body})
}

// LimitError is an error of a limit that was hit, which the error response names in
// its limit field (one of the Limit* names). It unwraps to Err, which is in the taxonomy
// (errdefs.ErrLimitExceeded).
type LimitError struct {
	Limit string
	Err   error
}

func (e *LimitError) Error() string { return e.Err.Error() }
func (e *LimitError) Unwrap() error { return e.Err }

// WriteErrorCode answers an error with an explicit status, code and message.
func WriteErrorCode(w http.ResponseWriter, status int, code, msg string) {
	WriteJSON(w, status, Error{Error: ErrorBody{Code: code, Message: msg}})
}

// WriteJSON answers v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true)
	_ = enc.Encode(v)
}

// DecodeJSON reads r's body into v strictly: the content type must be JSON, the body at
// most max bytes (MaxJSONBody when max is 0), one JSON value with no unknown fields and
// nothing after it. Its errors name what was wrong and are in the taxonomy.
func DecodeJSON(w http.ResponseWriter, r *http.Request, v any, max int64) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return fmt.Errorf("Content-Type %q: want application/json: %w", ct, ErrUnsupportedMedia)
		}
	}
	if max <= 0 {
		max = MaxJSONBody
	}
	body := http.MaxBytesReader(w, r.Body, max)
	return Decode(body, v, max)
}

// Decode is DecodeJSON's parser, on any reader: one JSON value, no unknown fields,
// nothing but space after it.
func Decode(body io.Reader, v any, max int64) error {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err, max)
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return decodeError(err, max)
		}
		return fmt.Errorf("request body: more than one JSON value: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

func decodeError(err error, max int64) error {
	var (
		maxErr    *http.MaxBytesError
		syntaxErr *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &maxErr):
		return fmt.Errorf("request body over %d bytes: %w", max, ErrTooLarge)
	case errors.Is(err, io.EOF):
		return fmt.Errorf("request body: empty; want a JSON object: %w", errdefs.ErrInvalidArgument)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("request body: JSON ends early: %w", errdefs.ErrInvalidArgument)
	case errors.As(err, &syntaxErr):
		return fmt.Errorf("request body: malformed JSON at byte %d: %s: %w", syntaxErr.Offset, syntaxErr.Error(), errdefs.ErrInvalidArgument)
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "(the body)"
		}
		return fmt.Errorf("request body: field %s: got JSON %s, want %s: %w", field, typeErr.Value, typeErr.Type, errdefs.ErrInvalidArgument)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return fmt.Errorf("request body: unknown field %s: %w", strings.TrimPrefix(err.Error(), "json: unknown field "), errdefs.ErrInvalidArgument)
	}
	return fmt.Errorf("request body: %s: %w", err.Error(), errdefs.ErrInvalidArgument)
}
