package httpmetrics_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/httpmetrics"
)

func TestStatusWriter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		handle func(w http.ResponseWriter)
		want   int
	}{
		{"nothing written", func(w http.ResponseWriter) {}, http.StatusOK},
		{"body only", func(w http.ResponseWriter) { _, _ = w.Write([]byte("hi")) }, http.StatusOK},
		{"status", func(w http.ResponseWriter) { w.WriteHeader(http.StatusTeapot) }, http.StatusTeapot},
		{"first status kept", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusNotFound)
			w.WriteHeader(http.StatusOK)
		}, http.StatusNotFound},
		{"body, then a status", func(w http.ResponseWriter) {
			_, _ = w.Write([]byte("hi"))
			w.WriteHeader(http.StatusInternalServerError)
		}, http.StatusOK},
		{"informational, then final", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusCreated)
		}, http.StatusCreated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sw := &httpmetrics.StatusWriter{ResponseWriter: httptest.NewRecorder()}
			tc.handle(sw)
			if got := sw.Status(); got != tc.want {
				t.Fatalf("Status() = %d, want %d", got, tc.want)
			}
		})
	}
}

// Informational sees a 1xx response's headers before they go out, and only a 1xx's.
func TestStatusWriterInformational(t *testing.T) {
	rec := httptest.NewRecorder()
	var seen []string
	sw := &httpmetrics.StatusWriter{ResponseWriter: rec, Informational: func(h http.Header) {
		seen = append(seen, h.Get("Link"))
		h.Del("Set-Cookie")
	}}
	sw.Header().Set("Link", "</app.css>; rel=preload")
	sw.Header().Set("Set-Cookie", "s=1")
	sw.WriteHeader(http.StatusEarlyHints)
	if len(seen) != 1 || seen[0] != "</app.css>; rel=preload" || sw.Header().Get("Set-Cookie") != "" {
		t.Fatalf("after a 103: hook saw %q, Set-Cookie %q; want the Link seen and the cookie gone", seen, sw.Header().Get("Set-Cookie"))
	}
	sw.WriteHeader(http.StatusOK)
	if len(seen) != 1 {
		t.Fatalf("hook called for a final status: %q", seen)
	}
}

// A stream flushes through the wrapper, as an http.Flusher and through ResponseController.
func TestStatusWriterFlushes(t *testing.T) {
	rec := httptest.NewRecorder()
	sw := &httpmetrics.StatusWriter{ResponseWriter: rec}
	sw.Flush()
	if !rec.Flushed {
		t.Fatal("Flush did not reach the wrapped writer")
	}
	rec.Flushed = false
	if err := http.NewResponseController(sw).Flush(); err != nil || !rec.Flushed {
		t.Fatalf("ResponseController.Flush = %v, flushed %v", err, rec.Flushed)
	}
}

func TestRegister(t *testing.T) {
	if err := httpmetrics.Register(nil, "none", prometheus.NewCounter(prometheus.CounterOpts{Name: "a_total", Help: "a"})); err != nil {
		t.Fatalf("nil registry: %v", err)
	}
	reg := prometheus.NewRegistry()
	c := func() prometheus.Collector {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "b_total", Help: "b"})
	}
	if err := httpmetrics.Register(reg, "first", c()); err != nil {
		t.Fatal(err)
	}
	if err := httpmetrics.Register(reg, "second", c()); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("registering twice = %v, want ErrAlreadyExists", err)
	}
	bad := prometheus.NewCounter(prometheus.CounterOpts{Name: "b_total", Help: "another help"})
	if err := httpmetrics.Register(reg, "third", bad); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("registering a clashing collector = %v, want ErrFailedPrecondition", err)
	}
}
