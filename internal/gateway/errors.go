package gateway

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/paddockhq/paddock/internal/api"
)

// refusal is an answer the gateway gives in the provider's place. Its message is shown to
// the sandbox: it says what happened and what to do, and never holds a key or an upstream's
// raw error. It unwraps to its place in the taxonomy.
type refusal struct {
	status     int
	msg        string
	retryAfter time.Duration // sent as Retry-After when > 0
	kind       error
}

func (r *refusal) Error() string { return r.msg }
func (r *refusal) Unwrap() error { return r.kind }

func refuse(status int, kind error, format string, args ...any) *refusal {
	return &refusal{status: status, kind: kind, msg: fmt.Sprintf(format, args...)}
}

// errorTypes name a status in each provider's error vocabulary, so that the providers'
// own SDKs classify the gateway's refusals as they would the provider's (a 429 is retried
// after Retry-After, a 413 is not).
var errorTypes = map[int][2]string{ // status → {openai type, anthropic type}
	http.StatusBadRequest:            {"invalid_request_error", "invalid_request_error"},
	http.StatusForbidden:             {"permission_error", "permission_error"},
	http.StatusNotFound:              {"invalid_request_error", "not_found_error"},
	http.StatusMethodNotAllowed:      {"invalid_request_error", "invalid_request_error"},
	http.StatusRequestEntityTooLarge: {"invalid_request_error", "request_too_large"},
	http.StatusTooManyRequests:       {"rate_limit_exceeded", "rate_limit_error"},
	http.StatusBadGateway:            {"server_error", "api_error"},
	http.StatusServiceUnavailable:    {"server_error", "overloaded_error"},
}

// openAIError is OpenAI's error body.
type openAIError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

// anthropicError is Anthropic's error body.
type anthropicError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// writeRefusal answers r in the error shape of the provider kind, or paddock's own API
// error shape when no provider is known (kind "").
func writeRefusal(w http.ResponseWriter, kind string, r *refusal) {
	h := w.Header()
	if r.retryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(r.retryAfter.Seconds())), 10))
	}
	types, ok := errorTypes[r.status]
	if !ok {
		types = [2]string{"invalid_request_error", "invalid_request_error"}
	}
	var body any
	switch kind {
	case KindOpenAI:
		var e openAIError
		e.Error.Message, e.Error.Type, e.Error.Code = r.msg, types[0], openAICode(r)
		body = e
	case KindAnthropic:
		var e anthropicError
		e.Type, e.Error.Type, e.Error.Message = "error", types[1], r.msg
		body = e
	default:
		_, code := api.StatusOf(r.kind)
		api.WriteErrorCode(w, r.status, code, r.msg)
		return
	}
	b, _ := json.Marshal(body)
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(r.status)
	_, _ = w.Write(append(b, '\n'))
}

// openAICode is the machine-readable code of an OpenAI error: OpenAI's own for a rate
// limit, paddock's API codes otherwise.
func openAICode(r *refusal) string {
	if r.status == http.StatusTooManyRequests {
		return "rate_limit_exceeded"
	}
	if r.status == http.StatusMethodNotAllowed {
		return api.CodeMethodNotAllowed
	}
	_, code := api.StatusOf(r.kind)
	return code
}
