package welcome

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// RoleHeader is the header in which the control plane's proxy says in what role the caller
// reaches the sandbox (owner, viewer, …).
const RoleHeader = "X-Paddock-Role"

// ServedByHeader, on every response, names the sandbox that served it, so that a test or a
// curious user can tell that the proxy reached the right sandbox.
const ServedByHeader = "X-Served-By"

// Bounds on what one request may ask for: the app must not be an amplifier.
const (
	maxEvents      = 10000
	maxInterval    = time.Minute
	maxStreamBytes = 1 << 30
	maxEchoMessage = 1 << 20
)

// Handler serves the app for info.
func Handler(info Info) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", info.page)
	mux.HandleFunc("GET /api/info", info.api)
	mux.HandleFunc("GET /ws/echo", echo)
	mux.HandleFunc("GET /sse", info.events)
	mux.HandleFunc("GET /stream", stream)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(ServedByHeader, info.Sandbox)
		mux.ServeHTTP(w, r)
	})
}

func role(r *http.Request) string {
	if v := r.Header.Get(RoleHeader); v != "" {
		return v
	}
	return "unknown"
}

// view is what the page and /api/info show.
type view struct {
	Sandbox   string `json:"sandbox"`
	Role      string `json:"role"`
	Hostname  string `json:"hostname"`
	Kernel    string `json:"kernel"`
	PID       int    `json:"pid"`
	StartedAt string `json:"started_at"`
	Build     string `json:"build"`
}

func (i Info) view(r *http.Request) view {
	return view{Sandbox: i.Sandbox, Role: role(r), Hostname: i.Hostname, Kernel: i.Kernel, PID: i.PID,
		StartedAt: i.Started.Format(time.RFC3339), Build: i.Build}
}

func (i Info) api(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(i.view(r))
}

func (i Info) page(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	v := i.view(r)
	_, _ = io.WriteString(w, pageFields(v.Sandbox, v.Role, v.Hostname, v.Kernel, v.StartedAt).Replace(pageHTML))
}

// echo sends every WebSocket message back as it came, text or binary.
func echo(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept has answered already
	}
	defer func() { _ = c.CloseNow() }()
	c.SetReadLimit(maxEchoMessage)
	ctx := r.Context()
	for {
		typ, msg, err := c.Read(ctx)
		if err != nil {
			return
		}
		if err := c.Write(ctx, typ, msg); err != nil {
			return
		}
	}
}

// events sends n Server-Sent Events, interval apart, each flushed as it is written.
func (i Info) events(w http.ResponseWriter, r *http.Request) {
	n, interval, err := eventParams(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	var tick <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	for seq := range n {
		if seq > 0 && tick != nil {
			select {
			case <-tick:
			case <-r.Context().Done():
				return
			}
		}
		data, _ := json.Marshal(struct {
			Sandbox string `json:"sandbox"`
			Seq     int    `json:"seq"`
		}{i.Sandbox, seq})
		if _, err := fmt.Fprintf(w, "id: %d\ndata: %s\n\n", seq, data); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// eventParams reads n (default 10) and interval (a Go duration, default 1s) of /sse.
func eventParams(q url.Values) (n int, interval time.Duration, err error) {
	n, interval = 10, time.Second
	if v := q.Get("n"); v != "" {
		if n, err = strconv.Atoi(v); err != nil || n < 0 || n > maxEvents {
			return 0, 0, fmt.Errorf("n=%q: want a count of 0-%d: %w", v, maxEvents, errdefs.ErrInvalidArgument)
		}
	}
	if v := q.Get("interval"); v != "" {
		if interval, err = time.ParseDuration(v); err != nil || interval < 0 || interval > maxInterval {
			return 0, 0, fmt.Errorf("interval=%q: want a duration of 0-%s: %w", v, maxInterval, errdefs.ErrInvalidArgument)
		}
	}
	return n, interval, nil
}

// stream sends bytes=N bytes (default 1 MiB) of a repeating pattern, for throughput tests.
func stream(w http.ResponseWriter, r *http.Request) {
	n, err := streamParams(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	_, _ = io.CopyN(w, &pattern{}, n)
}

func streamParams(q url.Values) (int64, error) {
	v := q.Get("bytes")
	if v == "" {
		return 1 << 20, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > maxStreamBytes {
		return 0, fmt.Errorf("bytes=%q: want a size of 0-%d: %w", v, maxStreamBytes, errdefs.ErrInvalidArgument)
	}
	return n, nil
}

// pattern reads as an endless run of the bytes 0-255 (byte i of it is Pattern(i)), so that a
// client can check what arrived.
type pattern struct{ off int64 }

// Pattern is byte i of what /stream sends.
func Pattern(i int64) byte { return byte(i) }

func (p *pattern) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = Pattern(p.off + int64(i))
	}
	p.off += int64(len(b))
	return len(b), nil
}

// pageFields fills pageHTML's {{…}} fields, HTML-escaped: every one is text in an
// element. (Not html/template: parsing a template when the package loads costs every
// sandbox's idle agent, which carries this app, a share of its memory.)
func pageFields(sandbox, role, hostname, kernel, started string) *strings.Replacer {
	e := html.EscapeString
	return strings.NewReplacer("{{.Sandbox}}", e(sandbox), "{{.Role}}", e(role), "{{.Hostname}}", e(hostname),
		"{{.Kernel}}", e(kernel), "{{.StartedAt}}", e(started))
}

const pageHTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>paddock sandbox {{.Sandbox}}</title>
<style>
body { font: 16px/1.5 system-ui, sans-serif; max-width: 40rem; margin: 3rem auto; padding: 0 1rem; color: #1d2433; }
h1 { font-size: 1.6rem; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .3rem 1rem; }
dt { color: #5b6478; }
dd { margin: 0; font-family: ui-monospace, monospace; }
#ws { margin-top: 1.5rem; }
</style>
</head>
<body>
<h1>Your paddock sandbox is running</h1>
<p>This page is served by an app inside the sandbox, reached through paddock's proxy.
The sandbox keeps it running, so to replace it choose another app:
<code>paddock app new --runtime node my-site</code> then <code>paddock app preview --dir my-site</code>
serves a new project's dev server here, and <code>paddock app set --port 8080 -- COMMAND</code>
serves a command of your own.</p>
<dl>
<dt>Sandbox</dt><dd id="sandbox">{{.Sandbox}}</dd>
<dt>Role</dt><dd id="role">{{.Role}}</dd>
<dt>Hostname</dt><dd>{{.Hostname}}</dd>
<dt>Kernel</dt><dd>{{.Kernel}}</dd>
<dt>Started</dt><dd>{{.StartedAt}}</dd>
</dl>
<p id="ws">WebSocket: connecting…</p>
<script>
(function () {
  var el = document.getElementById("ws");
  var ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + location.pathname.replace(/\/?$/, "/") + "ws/echo");
  ws.onopen = function () { el.textContent = "WebSocket: connected"; ws.send("ping"); };
  ws.onmessage = function (e) { el.textContent = "WebSocket: connected (echo: " + e.data + ")"; };
  ws.onerror = function () { el.textContent = "WebSocket: failed"; };
})();
</script>
</body>
</html>
`
