package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
)

// logger writes paddock's own log lines to stderr as "paddock: warn: message key=value":
// warnings and errors by default, everything with PADDOCK_DEBUG set.
func logger(w io.Writer) *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("PADDOCK_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(&lineHandler{w: w, level: level, mu: new(sync.Mutex)})
}

// lineHandler is a slog.Handler for a terminal: one short line per record, no timestamp.
type lineHandler struct {
	w     io.Writer
	level slog.Level
	attrs []slog.Attr
	mu    *sync.Mutex
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "paddock: %s: %s", strings.ToLower(r.Level.String()), r.Message)
	write := func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	}
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(write)
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h *lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(slices.Clip(h.attrs), as...)
	return &c
}

func (h *lineHandler) WithGroup(string) slog.Handler { return h }
