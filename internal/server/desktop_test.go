package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/origins"
	"github.com/paddockhq/paddock/internal/servertest"
)

// desktopReq sends a request to the desktop host at base with the client's cookies and
// the given Origin ("" for none).
func desktopReq(t *testing.T, c *servertest.Client, base, origin, method, path, body string, hdr map[string]string) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A sandbox's desktop host serves its owner the agent's page, and on its own origin that
// sandbox's file, exec, history and app API, nothing else; a state change or a WebSocket
// needs the desktop's own Origin; another user gets 404.
func TestDesktopHost(t *testing.T) {
	e := servertest.Start(t)
	alice, bob := e.Register(t, "alice"), e.Register(t, "bob")
	alice.Start()
	bob.Start()
	var roles, bobRoles api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
	bob.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &bobRoles)
	id := roles.Live.ID
	desk := e.AppsURL(origins.Host{Kind: origins.KindDesktop, ID: id})
	appOrigin := alice.SandboxURL(id)

	// The page comes from the agent, framed by nobody.
	resp := alice.AppAt(desk, "GET", "/", nil)
	page := readBody(t, resp)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "paddock desktop") {
		t.Fatalf("GET / on the desktop: %s %q", resp.Status, servertestClip(page))
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "frame-src 'self' "+appOrigin) {
		t.Errorf("desktop page CSP %q: want frame-ancestors 'none' and frame-src %s", csp, appOrigin)
	}

	api1 := "/api/v1/sandboxes/" + id
	t.Run("port", func(t *testing.T) {
		// The agent holds the desktop's port before the app starts: a process in the
		// sandbox cannot take it, and an app cannot be made to listen there.
		script := `use IO::Socket::INET; print IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 4751, Listen => 1, ReuseAddr => 1) ? "bound" : "taken"`
		if out := shIn(t, alice, id, "perl -e '"+script+"'"); out != "taken" {
			t.Errorf("a process in the sandbox binding the desktop's port: %q, want taken", out)
		}
		req := api.CreateSandboxRequest{Name: "x", App: api.Template{Command: []string{"sh"}, Port: 4751}}
		wantError(t, alice.DoToken("POST", "/api/v1/sandboxes", req), http.StatusBadRequest, "app.port")
	})
	t.Run("scope", func(t *testing.T) {
		for _, p := range []string{api1 + "/files/list?path=.", api1 + "/history", api1 + "/app", api1, "/api/v1/me/agent"} {
			if resp := desktopReq(t, alice, desk, "", "GET", p, "", nil); resp.StatusCode != http.StatusOK {
				t.Errorf("GET %s on the desktop: %s %s", p, resp.Status, readBody(t, resp))
			} else {
				resp.Body.Close()
			}
		}
		for _, p := range []string{
			"/api/v1/sandboxes/" + roles.Dev.ID + "/files/list?path=.", "/api/v1/sandboxes/" + bobRoles.Live.ID + "/files/list?path=.",
			"/api/v1/me/secrets", "/api/v1/tokens", "/api/v1/sandboxes", "/api/v1/me", "/api/v1/roles", "/api/v1/events",
			api1 + "/policy", api1 + "/capabilities", api1 + "/history/export", "/me/secrets",
		} {
			resp := desktopReq(t, alice, desk, "", "GET", p, "", nil)
			if body := readBody(t, resp); resp.StatusCode != http.StatusNotFound {
				t.Errorf("GET %s on the desktop: %s %s, want 404", p, resp.Status, body)
			}
		}
		// The Agent pane sets its owner's agent choice: from the desktop's own origin only.
		choice := `{"model": "m"}`
		if resp := desktopReq(t, alice, desk, "", "PUT", "/api/v1/me/agent", choice, map[string]string{"Content-Type": "application/json"}); resp.StatusCode != http.StatusForbidden {
			t.Errorf("PUT /api/v1/me/agent on the desktop without its Origin: %s %s, want 403", resp.Status, readBody(t, resp))
		}
		var set api.AgentSettings
		servertest.Decode(t, desktopReq(t, alice, desk, desk, "PUT", "/api/v1/me/agent", choice, map[string]string{"Content-Type": "application/json"}), http.StatusOK, &set)
		if set.Model != "m" {
			t.Errorf("PUT /api/v1/me/agent on the desktop: %+v", set)
		}
		for _, p := range []string{"/api/v1/promote", "/api/v1/tokens", api1 + "/stop", api1 + "/capabilities"} {
			resp := desktopReq(t, alice, desk, desk, "POST", p, "{}", map[string]string{"Content-Type": "application/json"})
			if body := readBody(t, resp); resp.StatusCode != http.StatusNotFound {
				t.Errorf("POST %s on the desktop: %s %s, want 404", p, resp.Status, body)
			}
		}
	})

	t.Run("provider step", func(t *testing.T) {
		// The build pane runs a provider's step on the desktop's origin, its events streamed.
		step := api1 + "/app/new"
		body := `{"runtime": "static", "name": "site", "dir": "site"}`
		hdr := map[string]string{"Content-Type": "application/json"}
		if resp := desktopReq(t, alice, desk, "", "POST", step, body, hdr); resp.StatusCode != http.StatusForbidden {
			t.Errorf("POST %s on the desktop without its Origin: %s %s, want 403", step, resp.Status, readBody(t, resp))
		}
		resp := desktopReq(t, alice, desk, desk, "POST", step, body, hdr)
		var evs []api.ProviderEvent
		err := paddock.ReadProviderEvents(resp.Body, func(ev api.ProviderEvent) { evs = append(evs, ev) })
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil || len(evs) == 0 || result(evs).Error != "" || !slices.Contains(ran(evs), "scaffold: write index.html") {
			t.Fatalf("POST %s on the desktop: %s, events %+v, %v; want the step's stream", step, resp.Status, evs, err)
		}
		msg := readBody(t, desktopReq(t, alice, desk, desk, "POST", api1+"/app/build", `{"dir": "nothing"}`, hdr))
		if !strings.Contains(msg, "looked for package.json (node)") {
			t.Errorf("a build of a directory no provider recognises, on the desktop: %q", msg)
		}
	})

	t.Run("origin", func(t *testing.T) {
		put := api1 + "/files/content?path=o.txt"
		for _, origin := range []string{"", appOrigin, alice.AppURL("live"), e.URL, "null"} {
			resp := desktopReq(t, alice, desk, origin, "PUT", put, "x", nil)
			if body := readBody(t, resp); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "is not this desktop's") {
				t.Errorf("PUT with Origin %q: %s %s, want 403", origin, resp.Status, body)
			}
		}
		resp := desktopReq(t, alice, desk, desk, "PUT", put, "x", nil)
		if body := readBody(t, resp); resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT with the desktop's Origin: %s %s", resp.Status, body)
		}
		stream := "ws" + strings.TrimPrefix(desk, "http") + api1 + "/exec/stream"
		for origin, want := range map[string]int{appOrigin: http.StatusForbidden, desk: http.StatusSwitchingProtocols} {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			ws, resp, _ := websocket.Dial(ctx, stream, &websocket.DialOptions{
				HTTPClient: alice.HTTP, HTTPHeader: http.Header{"Origin": {origin}}, Subprotocols: []string{api.StreamProtocol},
			})
			cancel()
			got := 0
			if resp != nil {
				got = resp.StatusCode
			}
			if ws != nil {
				ws.CloseNow()
			}
			if got != want {
				t.Errorf("exec stream from %s on the desktop: %d, want %d", origin, got, want)
			}
		}
	})

	t.Run("etag", func(t *testing.T) {
		content := api1 + "/files/content?path=" + url.QueryEscape("src/e.txt")
		resp := desktopReq(t, alice, desk, desk, "PUT", content, "one\n", nil)
		first := resp.Header.Get("ETag")
		if body := readBody(t, resp); resp.StatusCode != http.StatusOK || first == "" {
			t.Fatalf("PUT: %s ETag %q %s", resp.Status, first, body)
		}
		resp = desktopReq(t, alice, desk, "", "GET", content, "", nil)
		if body := readBody(t, resp); body != "one\n" || resp.Header.Get("ETag") != first {
			t.Fatalf("GET after PUT: %q ETag %q, want the PUT's %q", body, resp.Header.Get("ETag"), first)
		}
		shIn(t, alice, id, "echo two > /workspace/src/e.txt")
		resp = desktopReq(t, alice, desk, desk, "PUT", content, "mine\n", map[string]string{"If-Match": first})
		if body := readBody(t, resp); resp.StatusCode != http.StatusPreconditionFailed || !strings.Contains(body, "changed since it was read") || !strings.Contains(body, `"stale"`) {
			t.Fatalf("PUT over a change with a stale If-Match: %s %s, want 412 naming the change", resp.Status, body)
		}
		if out := shIn(t, alice, id, "cat /workspace/src/e.txt"); out != "two\n" {
			t.Fatalf("a refused save changed the file: %q", out)
		}
		resp = desktopReq(t, alice, desk, "", "GET", content, "", nil)
		now := resp.Header.Get("ETag")
		readBody(t, resp)
		resp = desktopReq(t, alice, desk, desk, "PUT", content, "mine\n", map[string]string{"If-Match": now})
		if body := readBody(t, resp); resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") == now {
			t.Fatalf("PUT with the current If-Match: %s %s", resp.Status, body)
		}
		for _, bad := range []string{"*", "W/" + now, now + ", " + first, "abc"} {
			resp = desktopReq(t, alice, desk, desk, "PUT", content, "z", map[string]string{"If-Match": bad})
			if body := readBody(t, resp); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "If-Match") {
				t.Errorf("If-Match %q: %s %s, want 400 naming If-Match", bad, resp.Status, body)
			}
		}
		// The control plane's own API honours it the same way.
		req, _ := http.NewRequest("PUT", e.URL+content, strings.NewReader("x"))
		req.Header.Set("Authorization", "Bearer "+alice.Token)
		req.Header.Set("If-Match", first)
		r2, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if body := readBody(t, r2); r2.StatusCode != http.StatusPreconditionFailed {
			t.Errorf("PUT with a stale If-Match on the control plane: %s %s", r2.Status, body)
		}
	})

	t.Run("other users", func(t *testing.T) {
		s := newStepper(t, sessionJar(t, bob))
		if resp := s.get(e.URL+"/auth/handoff?to="+url.QueryEscape(desk+"/"), true); resp.StatusCode != http.StatusNotFound {
			t.Errorf("bob's handoff to alice's desktop: %s, want 404", resp.Status)
		}
		resp := bob.AppToken(desk, "GET", "/", nil)
		if body := readBody(t, resp); resp.StatusCode != http.StatusNotFound {
			t.Errorf("bob's token on alice's desktop: %s %s, want 404", resp.Status, body)
		}
		// Alice's cookie on her desktop opens nothing of bob's desktop.
		bobDesk := e.AppsURL(origins.Host{Kind: origins.KindDesktop, ID: bobRoles.Live.ID})
		resp = desktopReq(t, alice, bobDesk, "", "GET", "/api/v1/sandboxes/"+bobRoles.Live.ID+"/files/list?path=.", "", nil)
		if body := readBody(t, resp); resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusNotFound {
			t.Errorf("alice on bob's desktop: %s %s, want 401 or 404", resp.Status, body)
		}
	})

	t.Run("preview", func(t *testing.T) {
		s := newStepper(t, alice.HTTP.Jar)
		to := s.expect(s.get(desk+"/desktop/preview", false), http.StatusSeeOther)
		if !strings.HasPrefix(to, appOrigin+"/?"+origins.HandoffParam+"=") {
			t.Fatalf("the preview went to %s, want %s with a code", to, appOrigin)
		}
		clean := s.expect(s.get(to, false), http.StatusSeeOther)
		if clean != appOrigin+"/" {
			t.Fatalf("the app host's exchange sent the frame to %s", clean)
		}
		if len(appCookies(alice.HTTP.Jar, appOrigin)) == 0 {
			t.Fatalf("no cookie on %s after the preview's handoff", appOrigin)
		}
		// In a frame, the cookie is partitioned to the framing site: SameSite=None would
		// otherwise let any site's frame carry it.
		to = s.expect(s.get(desk+"/desktop/preview", false), http.StatusSeeOther)
		req, _ := http.NewRequest("GET", to, nil)
		req.Header.Set("Sec-Fetch-Dest", "iframe")
		resp, err := s.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		set := resp.Header.Get("Set-Cookie")
		for _, want := range []string{origins.CookieName + "=", "SameSite=None", "Secure", "Partitioned", "HttpOnly"} {
			if !strings.Contains(set, want) {
				t.Errorf("the frame's cookie %q lacks %s", set, want)
			}
		}
		if strings.Contains(strings.ToLower(set), "domain=") {
			t.Errorf("the frame's cookie %q names a domain", set)
		}
	})

	t.Run("frame without a cookie", func(t *testing.T) {
		// The desktop reloads its frame on the app host directly; a frame with no cookie
		// there is told so (the desktop alone), to go through the handoff: no redirect, no code.
		s := newStepper(t, nil)
		req, _ := http.NewRequest("GET", appOrigin+"/", nil)
		req.Header.Set("Sec-Fetch-Dest", "iframe")
		req.Header.Set("Sec-Fetch-Mode", "navigate")
		resp, err := s.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := readBody(t, resp)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `parent.postMessage("paddock:preview-signin", "`+desk+`")`) {
			t.Fatalf("a frame without a cookie on %s: %s %q, want 401 posting to %s", appOrigin, resp.Status, servertestClip(body), desk)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors "+desk) || !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("the frame's sign-in page CSP %q: want frame-ancestors %s", csp, desk)
		}
		if resp.Header.Get("Location") != "" || resp.Header.Get("Set-Cookie") != "" {
			t.Errorf("the frame's sign-in page redirects or sets a cookie: %v", resp.Header)
		}
		// Not on the desktop's own host, nor for a fetch.
		req, _ = http.NewRequest("GET", appOrigin+"/", nil)
		req.Header.Set("Sec-Fetch-Dest", "empty")
		if resp, err = s.hc.Do(req); err != nil {
			t.Fatal(err)
		}
		if body := readBody(t, resp); resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "postMessage") {
			t.Errorf("a fetch without a cookie: %s %q", resp.Status, servertestClip(body))
		}
	})
}

func servertestClip(s string) string {
	if len(s) > 200 {
		return s[:200]
	}
	return s
}

// streamClient is one exec stream connection, read as text.
type streamClient struct {
	t  *testing.T
	ws *websocket.Conn
}

func dialStream(t *testing.T, url, token string, start any) *streamClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}, Subprotocols: []string{api.StreamProtocol},
	})
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	b, _ := json.Marshal(start)
	if err := ws.Write(ctx, websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}
	return &streamClient{t: t, ws: ws}
}

// until reads messages until the output holds want (or a text message does), and returns
// the output read and the text messages.
func (s *streamClient) until(want string) (string, []string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out strings.Builder
	var texts []string
	for {
		typ, data, err := s.ws.Read(ctx)
		if err != nil {
			s.t.Fatalf("waiting for %q: %v (output so far %q, messages %q)", want, err, out.String(), texts)
		}
		if typ == websocket.MessageText {
			texts = append(texts, string(data))
			if strings.Contains(string(data), want) {
				return out.String(), texts
			}
			continue
		}
		out.Write(data[1:])
		if strings.Contains(out.String(), want) {
			return out.String(), texts
		}
	}
}

func (s *streamClient) send(text string) {
	s.t.Helper()
	if err := s.ws.Write(context.Background(), websocket.MessageBinary, []byte(text)); err != nil {
		s.t.Fatal(err)
	}
}

// A kept terminal session outlives its connection: a new connection attaches to it (the
// shell's state is there) and gets the output it had not shown replayed; a session that
// was not kept, the app's, or another sandbox's cannot be attached to.
func TestExecStreamKeepAttach(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	alice.Start()
	var roles api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
	url := "ws" + strings.TrimPrefix(e.URL, "http") + "/api/v1/sandboxes/" + roles.Live.ID + "/exec/stream"
	tty := &api.TTYSize{Rows: 24, Cols: 80}

	s := dialStream(t, url, alice.Token, api.StreamStart{Argv: []string{"/bin/sh"}, TTY: tty, Keep: true})
	_, texts := s.until(`"started"`)
	var started api.StreamStarted
	if err := json.Unmarshal([]byte(texts[len(texts)-1]), &started); err != nil || started.SessionID == "" {
		t.Fatalf("first message %q: want a StreamStarted with the session", texts)
	}
	s.send("X=kept-$((3*3)); echo mark-$((1+1))\n")
	out, _ := s.until("mark-2")
	shown := uint64(len(out))
	// Output made while nobody is attached is replayed on attach.
	s.send("sleep 1; echo while-away-$((4+4))\n")
	s.ws.CloseNow()

	a := dialStream(t, url, alice.Token, api.StreamStart{Attach: started.SessionID, Offset: shown, TTY: tty})
	a.send("echo \"$X\"\n")
	out, _ = a.until("kept-9")
	if !strings.Contains(out, "while-away-8") {
		t.Errorf("the attach did not replay the output made while away: %q", out)
	}
	if strings.Contains(out, "mark-2") {
		t.Errorf("the attach replayed output the client had shown (offset %d): %q", shown, out)
	}
	a.send("exit 7\n")
	if _, texts := a.until(`"exit"`); !strings.Contains(texts[len(texts)-1], `"exit_code":7`) {
		t.Errorf("the shell's end: %q", texts)
	}
	a.ws.CloseNow()

	// Once it exited it is gone; a session that was not kept, or the app's, cannot be had.
	g := dialStream(t, url, alice.Token, api.StreamStart{Attach: started.SessionID})
	if _, texts := g.until(`"exit"`); !strings.Contains(texts[len(texts)-1], "no kept session") {
		t.Errorf("attach to an ended session: %q", texts)
	}
	g.ws.CloseNow()
	plain := dialStream(t, url, alice.Token, api.StreamStart{Argv: []string{"sleep", "30"}})
	plain.ws.CloseNow()
	m := dialStream(t, url, alice.Token, api.StreamStart{Attach: "main"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, _, err := m.ws.Read(ctx); websocket.CloseStatus(err) != api.CloseBadRequest {
		t.Errorf("attach to the app's session: %v, want close %d", err, api.CloseBadRequest)
	}
	bad := dialStream(t, url, alice.Token, api.StreamStart{Argv: []string{"sh"}, Keep: true})
	if _, _, err := bad.ws.Read(ctx); websocket.CloseStatus(err) != api.CloseBadRequest {
		t.Errorf("keep without a tty: %v, want close %d", err, api.CloseBadRequest)
	}

	// A restarted sandbox reuses session IDs: a session kept before is gone, and its ID
	// does not attach to whatever runs under it now.
	k := dialStream(t, url, alice.Token, api.StreamStart{Argv: []string{"/bin/sh"}, TTY: tty, Keep: true})
	_, texts = k.until(`"started"`)
	var old api.StreamStarted
	if err := json.Unmarshal([]byte(texts[len(texts)-1]), &old); err != nil {
		t.Fatal(err)
	}
	k.ws.CloseNow()
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+roles.Live.ID+"/restart", nil), http.StatusOK, nil)
	n := dialStream(t, url, alice.Token, api.StreamStart{Argv: []string{"/bin/sh"}, TTY: tty, Keep: true})
	n.until(`"started"`)
	after := dialStream(t, url, alice.Token, api.StreamStart{Attach: old.SessionID})
	if _, texts := after.until(`"exit"`); !strings.Contains(texts[len(texts)-1], "no kept session") {
		t.Errorf("attach to a session kept before a restart: %q", texts)
	}
	after.ws.CloseNow()
	n.ws.CloseNow()
}
