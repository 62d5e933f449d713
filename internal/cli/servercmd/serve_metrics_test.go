package servercmd

import (
	"io"
	"log/slog"
	"net/http"
	"testing"
)

// metrics.listen serves /metrics alone: the handler it is given, and nothing else.
func TestServeMetricsListen(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "# HELP up\n") })
	addr, stop, err := serveMetrics("127.0.0.1:0", h, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for path, want := range map[string]int{"/metrics": 200, "/api/v1/me": 404, "/": 404} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s on metrics.listen: %d, want %d", path, resp.StatusCode, want)
		}
	}
	if _, _, err := serveMetrics(addr, h, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("a second listener on the same address: no error")
	}
}
