package server_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/origins"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/store/pgtest"
	"github.com/paddockhq/paddock/internal/testenv"
)

// metric reads counter name{replica="label"} from r's /metrics (0 when absent).
func (r *replica) metric(t *testing.T, name, label string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", r.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+replicaMetricsToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s's metrics: %d %s", r.id, resp.StatusCode, body)
	}
	m := regexp.MustCompile(`(?m)^` + name + `\{replica="` + label + `"\} (\d+)$`).FindSubmatch(body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// A client of r2's apps host whose sandbox runs on r1 is handed on to r1 with its whole
// connection: many requests over one connection are one hand-on, not one hop each; a
// promotion that moves the live role to r2's sandbox moves the connection's next request
// (r1 forwards it back over the HTTP hop); a WebSocket works over a handed-on connection
// and closes with 4001 at a promotion; a hand-on that no replica signed, or whose preamble
// is not signed for its nonce, is refused.
func TestReplicasHandOn(t *testing.T) {
	testenv.RequireRoot(t)
	rs := startReplicas(t, pgtest.URL(t), 2)
	r1, r2 := rs[0], rs[1]
	alice := (&servertest.Env{URL: r1.url}).Register(t, "alice")
	var roles api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Her dev sandbox made again through r2: live runs on r1, dev on r2.
	if code, body, err := tokenDo(ctx, r1.url, alice.Token, "DELETE", "/api/v1/sandboxes/"+roles.Dev.ID, nil); err != nil || code != http.StatusNoContent {
		t.Fatalf("delete alice's dev sandbox: %d %s %v", code, body, err)
	}
	code, body, err := tokenDo(ctx, r2.url, alice.Token, "GET", "/api/v1/roles", nil)
	if err != nil || code != http.StatusOK || json.Unmarshal(body, &roles) != nil {
		t.Fatalf("alice's roles through r2: %d %s %v", code, body, err)
	}
	t.Cleanup(func() {
		for _, id := range []string{roles.Live.ID, roles.Dev.ID} {
			tokenDo(context.Background(), r1.url, alice.Token, "DELETE", "/api/v1/sandboxes/"+id, nil)
		}
	})
	onR1, onR2 := roles.Live.ID, roles.Dev.ID

	// One kept-alive connection to r2.
	var dials atomic.Int32
	tr := servertest.Transport()
	tr.MaxConnsPerHost = 1
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, r2.addr)
	}
	viaR2 := &http.Client{Transport: tr, Timeout: 2 * time.Minute}
	liveURL := servertest.AppsURL(r2.url, origins.Host{Kind: origins.KindLive, ID: alice.User.ID}) + "/api/info"
	ask := func() (string, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", liveURL, nil)
		req.Header.Set("Authorization", "Bearer "+alice.Token)
		resp, err := viaR2.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got struct{ Sandbox, Role string }
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &got) != nil {
			t.Fatalf("alice's live app through r2: %d %s", resp.StatusCode, b)
		}
		return got.Sandbox, got.Role
	}
	for i := range 20 {
		if sb, role := ask(); sb != onR1 || role != "live" {
			t.Fatalf("request %d: served by %s as %q, want %s as live", i, sb, role, onR1)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("the client dialled r2 %d times, want one kept-alive connection", n)
	}
	if in, out, fwd := r1.metric(t, "paddock_replica_taken_on_total", "r2"), r2.metric(t, "paddock_replica_handed_on_total", "r1"),
		r2.metric(t, "paddock_replica_forwarded_total", "r1"); in != 1 || out != 1 || fwd != 0 {
		t.Fatalf("20 requests on one connection: r1 took %d connections from r2, r2 handed %d on and forwarded %d requests; want 1, 1, 0", in, out, fwd)
	}

	// A promotion moves live to r2's sandbox: the next request on the handed-on
	// connection is served by it, forwarded by r1 over the HTTP hop.
	if code, body, err := tokenDo(ctx, r1.url, alice.Token, "POST", "/api/v1/promote", nil); err != nil || code != http.StatusOK {
		t.Fatalf("promote: %d %s %v", code, body, err)
	}
	if sb, role := ask(); sb != onR2 || role != "live" {
		t.Fatalf("after the promotion: served by %s as %q, want %s as live", sb, role, onR2)
	}
	if n, fwd := dials.Load(), r1.metric(t, "paddock_replica_forwarded_total", "r2"); n != 1 || fwd < 1 {
		t.Fatalf("after the promotion: %d dials to r2, %d requests forwarded by r1 to r2; want 1 and at least 1", n, fwd)
	}

	// A WebSocket to her dev host (now r1's sandbox) through r2 is handed on, and closes
	// with 4001 at the next promotion.
	wsURL := strings.Replace(servertest.AppsURL(r2.url, origins.Host{Kind: origins.KindDev, ID: alice.User.ID}), "http", "ws", 1) + "/ws/echo"
	ws, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: appsClient,
		HTTPHeader: http.Header{"Authorization": {"Bearer " + alice.Token}}})
	if err != nil {
		t.Fatalf("WebSocket to alice's dev app through r2: %v", err)
	}
	defer ws.CloseNow()
	if err := ws.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := ws.Read(ctx); err != nil || string(msg) != "hi" {
		t.Fatalf("echo over a handed-on connection: %q %v", msg, err)
	}
	if in := r1.metric(t, "paddock_replica_taken_on_total", "r2"); in != 2 {
		t.Fatalf("r1 took %d connections from r2, want 2 (the WebSocket's)", in)
	}
	if code, body, err := tokenDo(ctx, r2.url, alice.Token, "POST", "/api/v1/promote", nil); err != nil || code != http.StatusOK {
		t.Fatalf("promote: %d %s %v", code, body, err)
	}
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	if _, _, err := ws.Read(wctx); websocket.CloseStatus(err) != api.CloseOwnerChanged {
		t.Fatalf("the handed-on WebSocket after a promotion: %v (code %d), want %d", err, websocket.CloseStatus(err), api.CloseOwnerChanged)
	}

	// Hand-ons sent to r1 by the test, which is no replica unless it signs with the key.
	key, err := os.ReadFile(r1.clusterKey)
	if err != nil {
		t.Fatal(err)
	}
	clusterKey, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(key)))
	if err != nil {
		t.Fatal(err)
	}
	liveHost := origins.Host{Kind: origins.KindLive, ID: alice.User.ID}.Label() + "." + origins.DefaultAppsDomain
	first := "GET /api/info HTTP/1.1\r\nHost: " + liveHost + "\r\nAuthorization: Bearer " + alice.Token + "\r\nConnection: close\r\n\r\n"
	taken := r1.metric(t, "paddock_replica_taken_on_total", "r2")
	handOn := func(sign bool, preamble func(nonce []byte) []byte, first string) (status string, next string) {
		t.Helper()
		c, err := net.DialTimeout("tcp", r1.addr, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Minute))
		req, _ := http.NewRequest("GET", "http://"+r1.addr+server.HandOnPath, nil)
		req.Header.Set("Upgrade", server.HandOnProto)
		req.Header.Set("Connection", "Upgrade")
		if sign {
			server.SignHop(clusterKey, "r2", req)
		} else {
			req.Header.Set(server.HopHeader, fmt.Sprintf("v1 r2 %d - AAAA", time.Now().Unix()))
		}
		req.Write(c)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			t.Fatalf("hand-on answered: %v", err)
		}
		resp.Body.Close()
		nonce, _ := base64.RawURLEncoding.DecodeString(resp.Header.Get("Paddock-Hand-On-Nonce"))
		io.WriteString(c, string(preamble(nonce))+first)
		after, err := http.ReadResponse(br, nil)
		if err != nil {
			return resp.Status, ""
		}
		defer after.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(after.Body, 4096))
		return resp.Status, after.Status + " " + string(b)
	}
	good := func(nonce []byte) []byte { return server.HandOnPreamble(clusterKey, nonce, false, "192.0.2.7:4242") }
	// A hop header no replica signed: refused before the preamble is read, which is then
	// no request either.
	if status, after := handOn(false, good, first); !strings.HasPrefix(status, "403") || after != "" {
		t.Errorf("an unsigned hand-on: %s, then %q; want 403 and nothing served", status, after)
	}
	// Signed, but its preamble signed for another nonce (a replay's) or under another key.
	for name, p := range map[string]func([]byte) []byte{
		"another nonce": func([]byte) []byte {
			return server.HandOnPreamble(clusterKey, make([]byte, 16), false, "192.0.2.7:4242")
		},
		"another key": func(n []byte) []byte {
			return server.HandOnPreamble([]byte(strings.Repeat("x", 32)), n, false, "192.0.2.7:4242")
		},
	} {
		if status, after := handOn(true, p, first); !strings.HasPrefix(status, "101") || after != "" {
			t.Errorf("a hand-on with a preamble of %s: %s, then %q; want the connection closed after the upgrade", name, status, after)
		}
	}
	if n := r1.metric(t, "paddock_replica_taken_on_total", "r2"); n != taken {
		t.Errorf("r1 took %d connections from r2 after the refused ones, want %d", n, taken)
	}
	// The control: signed, and its preamble for its nonce, the request is served.
	if status, after := handOn(true, good, first); !strings.HasPrefix(status, "101") || !strings.HasPrefix(after, "200 OK") || !strings.Contains(after, onR1) {
		t.Errorf("a hand-on signed with the cluster key: %s, then %q; want 101 and alice's live app", status, after)
	}
	// The preamble says whether the client's connection was TLS, and the owner answers
	// as over TLS: a WebSocket whose Origin is the host over plain http is then refused.
	ws2 := "GET /ws/echo HTTP/1.1\r\nHost: " + liveHost + "\r\nAuthorization: Bearer " + alice.Token +
		"\r\nOrigin: http://" + liveHost + "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	for _, secure := range []bool{false, true} {
		p := func(nonce []byte) []byte { return server.HandOnPreamble(clusterKey, nonce, secure, "192.0.2.7:4242") }
		want := "101"
		if secure {
			want = "403"
		}
		if status, after := handOn(true, p, ws2); !strings.HasPrefix(status, "101") || !strings.HasPrefix(after, want) {
			t.Errorf("a WebSocket from http://%s handed on with secure=%t: %s, then %q; want %s", liveHost, secure, status, after, want)
		}
	}
}
