// Package httpmetrics holds what paddock's HTTP front doors (the control plane's routes,
// the apps proxy, the provider gateway) share for their telemetry: a ResponseWriter that
// remembers the status a request got, and the registration of a component's collectors.
package httpmetrics

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// StatusWriter remembers the final status of a response for metrics. It passes
// informational (1xx) statuses on without keeping them: the status a client ends with
// comes after them.
type StatusWriter struct {
	http.ResponseWriter
	// Informational, when set, is called with the response's headers before a 1xx status
	// goes out. The proxy scrubs them there: ReverseProxy copies an app's 1xx headers to
	// the client as they are.
	Informational func(http.Header)
	code          int
}

// WriteHeader keeps the first final status.
func (w *StatusWriter) WriteHeader(code int) {
	if code >= 100 && code < 200 {
		if w.Informational != nil {
			w.Informational(w.Header())
		}
	} else if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write counts as a 200 when no status was written first, as net/http does.
func (w *StatusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Status is the response's status: 200 until a final one is written.
func (w *StatusWriter) Status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

// Unwrap lets http.ResponseController reach the writer's Hijack and deadlines.
func (w *StatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush keeps streaming responses streaming for callers that ask for an http.Flusher.
func (w *StatusWriter) Flush() { _ = w.FlushError() }

// FlushError is what http.ResponseController calls: the wrapped writer's flush, error
// and all.
func (w *StatusWriter) FlushError() error {
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Register registers a component's collectors with reg; a nil reg registers none. A
// collector registered already (a second component on the same registry) is
// ErrAlreadyExists, any other refusal ErrFailedPrecondition.
func Register(reg prometheus.Registerer, component string, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			code := errdefs.ErrFailedPrecondition
			if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
				code = errdefs.ErrAlreadyExists
			}
			return fmt.Errorf("%s: registering metrics: %v: %w", component, err, code)
		}
	}
	return nil
}
