package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/origins"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/store/pgtest"
	"github.com/paddockhq/paddock/internal/testenv"
)

// replica is one `paddock serve` process of a cluster under test.
type replica struct {
	id, url, addr, config string
	clusterKey            string // the cluster key's file, shared by all
	cmd                   *exec.Cmd
	out                   *lockedBuffer
}

// testHeartbeatTTL is the replicas' heartbeat_ttl in these tests: long enough that a
// replica starved of CPU on a loaded machine is not taken for dead, short enough that
// the tests that wait for one to expire stay quick.
const testHeartbeatTTL = 8 * time.Second

// replicaMetricsToken reads every replica's /metrics.
const replicaMetricsToken = "metrics-token-of-the-replicas-under-test"

// startReplicas writes the configuration of n replicas on the PostgreSQL database dbURL,
// each with a data and state dir of its own and the same secrets and cluster keys, and
// starts them one after the other (the first makes the keys).
func startReplicas(t *testing.T, dbURL string, n int) []*replica {
	t.Helper()
	return startReplicasWith(t, dbURL, n, "")
}

// startReplicasWith is startReplicas with more of each replica's configuration (YAML).
func startReplicasWith(t *testing.T, dbURL string, n int, extra string) []*replica {
	t.Helper()
	shared := t.TempDir()
	if err := os.WriteFile(filepath.Join(shared, "metrics.token"), []byte(replicaMetricsToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var rs []*replica
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		rc := testenv.Config(t)
		r := &replica{id: fmt.Sprintf("r%d", i+1), addr: addr, url: "http://" + addr, config: filepath.Join(t.TempDir(), "paddock.yaml"),
			clusterKey: filepath.Join(shared, "cluster.key")}
		yaml := fmt.Sprintf(`data_dir: %s
state_dir: %s
agent: %s
store: %s
secrets_key_file: %s
replica:
  id: %s
  advertise: %s
  cluster_key_file: %s
  heartbeat_ttl: %s
reconnects: {limit: 3, window_seconds: 600}
disk_reserve: 2G
metrics: {token_file: %s}
%s`, rc.DataDir, rc.StateDir, rc.Agent, dbURL, filepath.Join(shared, "secrets.key"), r.id, addr, r.clusterKey, testHeartbeatTTL,
			filepath.Join(shared, "metrics.token"), extra)
		if err := os.WriteFile(r.config, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		r.start(t)
		rs = append(rs, r)
	}
	t.Cleanup(func() {
		for _, r := range rs {
			if r.cmd != nil {
				stopServe(t, r.cmd)
			}
			if t.Failed() && r.out != nil {
				out := r.out.String()
				t.Logf("%s's log (its last 8 KiB):\n%s", r.id, out[max(0, len(out)-8192):])
			}
		}
	})
	return rs
}

func (r *replica) start(t *testing.T) {
	t.Helper()
	cmd, out, err := startServeAt(t, r.config, r.addr)
	if err != nil {
		t.Fatal(err)
	}
	r.cmd, r.out = cmd, out
}

func (r *replica) kill() {
	r.cmd.Process.Signal(syscall.SIGKILL)
	r.cmd.Wait()
	r.cmd = nil
}

// balanced is a client that reaches r whatever the URL's host, as a load balancer in
// front of the replicas would, with the cookies of jar.
func balanced(r *replica, jar http.CookieJar) *http.Client {
	tr := servertest.Transport()
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, r.addr)
	}
	return &http.Client{Timeout: 2 * time.Minute, Transport: tr, Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// appsClient reaches apps hosts on loopback; it follows no redirect.
var appsClient = &http.Client{Timeout: 2 * time.Minute, Transport: servertest.Transport(),
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// info asks the app on user's role host through base for /api/info.
func info(base, userID, role, token string, set func(*http.Request)) (int, map[string]string, error) {
	u := servertest.AppsURL(base, origins.Host{Kind: origins.Kind(role), ID: userID}) + "/api/info"
	req, _ := http.NewRequest("GET", u, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if set != nil {
		set(req)
	}
	resp, err := appsClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	v := map[string]string{"body": string(body)}
	if resp.StatusCode == http.StatusOK {
		var got struct{ Sandbox, Role string }
		if err := json.Unmarshal(body, &got); err != nil {
			return resp.StatusCode, nil, fmt.Errorf("%s: %w", body, err)
		}
		v["sandbox"], v["role"] = got.Sandbox, got.Role
	}
	return resp.StatusCode, v, nil
}

// tokenDo sends an API request with token to base.
func tokenDo(ctx context.Context, base, token, method, path string, body []byte) (int, []byte, error) {
	req, _ := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, nil
}

// promotion is one acknowledged promotion of a user: when it was asked, when it was
// answered, and who was live after it.
type promotion struct {
	began, acked time.Time
	live         string
}

// served is one proxied request to a live host that the app answered.
type served struct {
	user         string
	began, ended time.Time
	sandbox      string
	role         string
}

// The test, with real processes: three `paddock serve` replicas on one
// PostgreSQL database, a load generator across them (the apps hosts and the API, round
// robin), promotions in the middle and a SIGKILL of one replica. Every acknowledged write
// reads back afterwards through another replica; no request is served by the wrong role;
// the killed replica's sandboxes answer 503 naming it, not a hang; held WebSockets close
// with 4001 when a promotion is made on another replica; a client's own hop header is
// ignored.
func TestReplicas(t *testing.T) {
	testenv.RequireRoot(t)
	dbURL := pgtest.URL(t)
	rs := startReplicas(t, dbURL, 3)

	// Each user's sandboxes are made by the replica the user first asks.
	type user struct {
		c        *servertest.Client
		home     *replica
		roles    api.Roles
		mu       sync.Mutex
		promoted []promotion
	}
	var users []*user
	for i, name := range []string{"alice", "bob", "carol"} {
		e := &servertest.Env{URL: rs[i].url}
		u := &user{c: e.Register(t, name), home: rs[i]}
		u.c.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &u.roles)
		users = append(users, u)
	}
	t.Cleanup(func() {
		for _, u := range users {
			for _, id := range []string{u.roles.Live.ID, u.roles.Dev.ID} {
				tokenDo(context.Background(), u.home.url, u.c.Token, "DELETE", "/api/v1/sandboxes/"+id, nil)
			}
		}
	})
	alice, bob, carol := users[0], users[1], users[2]
	for _, u := range users {
		u.promoted = []promotion{{live: u.roles.Live.ID}}
		// The other replicas see the same roles, and serve the app of either role.
		for _, r := range rs {
			var got api.Roles
			code, body, err := tokenDo(context.Background(), r.url, u.c.Token, "GET", "/api/v1/roles", nil)
			if err != nil || code != http.StatusOK || json.Unmarshal(body, &got) != nil || got.Live.ID != u.roles.Live.ID {
				t.Fatalf("%s's roles through %s: %d %s %v, want live %s", u.c.User.Username, r.id, code, body, err, u.roles.Live.ID)
			}
			for _, role := range []string{"live", "dev"} {
				code, v, err := info(r.url, u.c.User.ID, role, u.c.Token, nil)
				want := u.roles.Live.ID
				if role == "dev" {
					want = u.roles.Dev.ID
				}
				if err != nil || code != http.StatusOK || v["sandbox"] != want || v["role"] != role {
					t.Fatalf("%s's %s app through %s: %d %v %v, want %s as %s", u.c.User.Username, role, r.id, code, v, err, want, role)
				}
			}
		}
	}

	// A client's own hop header authenticates nothing: without credentials the apps host
	// still wants them, and with a token the request is served as usual.
	forged := func(r *http.Request) {
		r.Header.Set(server.HopHeader, fmt.Sprintf("v1 r1 %d %s AAAA", time.Now().Unix(), alice.c.User.ID))
	}
	if code, v, err := info(rs[1].url, alice.c.User.ID, "live", "", forged); err != nil || code != http.StatusUnauthorized {
		t.Errorf("a forged hop header without credentials: %d %v %v, want 401", code, v, err)
	}
	if code, v, err := info(rs[1].url, alice.c.User.ID, "live", alice.c.Token, forged); err != nil || code != http.StatusOK || v["sandbox"] != alice.roles.Live.ID {
		t.Errorf("a forged hop header with a token: %d %v %v, want alice's live app", code, v, err)
	}

	// A desktop host's API reaches its sandbox through any replica.
	if code, body, err := tokenDo(context.Background(), rs[0].url, alice.c.Token, "PUT",
		"/api/v1/sandboxes/"+alice.roles.Dev.ID+"/files/content?path=desk.txt", []byte("desk")); err != nil || code != http.StatusOK {
		t.Fatalf("write desk.txt: %d %s %v", code, body, err)
	}
	desk := servertest.AppsURL(rs[1].url, origins.Host{Kind: origins.KindDesktop, ID: alice.roles.Dev.ID})
	req, _ := http.NewRequest("GET", desk+"/api/v1/sandboxes/"+alice.roles.Dev.ID+"/files/content?path=desk.txt", nil)
	req.Header.Set("Authorization", "Bearer "+alice.c.Token)
	if resp, err := appsClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "desk" {
			t.Errorf("desk.txt through the desktop host on r2: %d %s, want desk", resp.StatusCode, body)
		}
	}

	// Reconnect storms are counted across replicas: bob's WebSockets to his live app (run
	// by r2) and to a sandbox of his that r1 runs, opened through all three replicas, are
	// one count against the limit of 3.
	var extra api.Sandbox
	if code, body, err := tokenDo(context.Background(), rs[0].url, bob.c.Token, "POST", "/api/v1/sandboxes", []byte(`{}`)); err != nil || code != http.StatusCreated || json.Unmarshal(body, &extra) != nil {
		t.Fatalf("create a sandbox of bob's on r1: %d %s %v", code, body, err)
	}
	t.Cleanup(func() {
		tokenDo(context.Background(), rs[0].url, bob.c.Token, "DELETE", "/api/v1/sandboxes/"+extra.ID, nil)
	})
	wsTo := func(r *replica, h origins.Host) (int, error) {
		u := strings.Replace(servertest.AppsURL(r.url, h), "http", "ws", 1) + "/ws/echo"
		dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
		defer dcancel()
		ws, resp, err := websocket.Dial(dctx, u, &websocket.DialOptions{HTTPClient: appsClient,
			HTTPHeader: http.Header{"Authorization": {"Bearer " + bob.c.Token}}})
		if err != nil {
			if resp != nil {
				return resp.StatusCode, err
			}
			return 0, err
		}
		ws.Close(websocket.StatusNormalClosure, "")
		return http.StatusSwitchingProtocols, nil
	}
	bobLive, bobApp := origins.Host{Kind: origins.KindLive, ID: bob.c.User.ID}, origins.Host{Kind: origins.KindApp, ID: extra.ID}
	for i, step := range []struct {
		r *replica
		h origins.Host
	}{{rs[0], bobLive}, {rs[1], bobApp}, {rs[2], bobLive}} {
		if code, err := wsTo(step.r, step.h); code != http.StatusSwitchingProtocols {
			t.Fatalf("bob's WebSocket %d through %s: %d %v", i+1, step.r.id, code, err)
		}
	}
	if code, err := wsTo(rs[0], bobApp); code != http.StatusTooManyRequests {
		t.Errorf("bob's 4th WebSocket in the window, through r1: %d %v, want 429 (a storm counted across replicas)", code, err)
	}

	// A browser behind a load balancer: the handoff code minted by r1 is exchanged on r2,
	// and the app cookie it gives works on r3 (the apps hosts' sign-ins are shared).
	appURL := servertest.AppsURL(rs[0].url, origins.Host{Kind: origins.KindLive, ID: alice.c.User.ID}) + "/api/info"
	step := func(r *replica, u string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", u, nil)
		req.Header.Set("Accept", "text/html")
		resp, err := balanced(r, alice.c.HTTP.Jar).Do(req)
		if err != nil {
			t.Fatalf("GET %s through %s: %v", u, r.id, err)
		}
		resp.Body.Close()
		return resp
	}
	resp := step(rs[0], rs[0].url+origins.HandoffPath(appURL))
	withCode := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.Contains(withCode, origins.HandoffParam+"=") {
		t.Fatalf("handoff on r1: %d to %q, want 303 to the app with a code", resp.StatusCode, withCode)
	}
	if resp = step(rs[1], withCode); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != appURL {
		t.Fatalf("code exchanged on r2: %d to %q, want 303 to %s", resp.StatusCode, resp.Header.Get("Location"), appURL)
	}
	if resp = step(rs[2], appURL); resp.StatusCode != http.StatusOK {
		t.Fatalf("app cookie on r3: %d, want 200", resp.StatusCode)
	}

	// A WebSocket to alice's live app held through r2 (her sandboxes run on r1) closes
	// with 4001 when she promotes through r3.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	wsURL := strings.Replace(servertest.AppsURL(rs[1].url, origins.Host{Kind: origins.KindLive, ID: alice.c.User.ID}), "http", "ws", 1) + "/ws/echo"
	ws, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: appsClient,
		HTTPHeader: http.Header{"Authorization": {"Bearer " + alice.c.Token}}})
	if err != nil {
		t.Fatalf("WebSocket to alice's live app through r2: %v", err)
	}
	if err := ws.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := ws.Read(ctx); err != nil || string(msg) != "hi" {
		t.Fatalf("echo through r2: %q %v", msg, err)
	}
	promote := func(u *user, through *replica) error {
		began := time.Now()
		code, body, err := tokenDo(ctx, through.url, u.c.Token, "POST", "/api/v1/promote", nil)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("promote %s through %s: %d %s %v", u.c.User.Username, through.id, code, body, err)
		}
		var after api.Roles
		if err := json.Unmarshal(body, &after); err != nil {
			return err
		}
		u.mu.Lock()
		u.promoted = append(u.promoted, promotion{began: began, acked: time.Now(), live: after.Live.ID})
		u.mu.Unlock()
		return nil
	}
	if err := promote(alice, rs[2]); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	if _, _, err := ws.Read(wctx); websocket.CloseStatus(err) != api.CloseOwnerChanged {
		t.Fatalf("alice's WebSocket after a promotion on another replica: %v (code %d), want %d", err, websocket.CloseStatus(err), api.CloseOwnerChanged)
	}

	// A promotion waits for every live replica to apply it: through r1, with r2 paused
	// (SIGSTOP), it is answered only once r2's heartbeat has expired. Resumed, r2 serves
	// alice's live app from the new owner, not from the roles it had cached.
	if code, v, err := info(rs[1].url, alice.c.User.ID, "live", alice.c.Token, nil); err != nil || code != http.StatusOK {
		t.Fatalf("alice's live app through r2: %d %v %v", code, v, err)
	}
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rs[1].cmd.Process.Signal(syscall.SIGSTOP)
	err = promote(alice, rs[0])
	r2, rerr := st.ReplicaByID(ctx, "r2")
	rs[1].cmd.Process.Signal(syscall.SIGCONT)
	if err != nil || rerr != nil {
		t.Fatal(err, rerr)
	}
	if age := time.Since(r2.HeartbeatAt); age < testHeartbeatTTL {
		t.Errorf("a promotion was answered while r2, paused, was alive (heartbeat %s old) and had not applied it", age.Round(time.Millisecond))
	}
	alice.mu.Lock()
	nowLive := alice.promoted[len(alice.promoted)-1].live
	alice.mu.Unlock()
	if code, v, err := info(rs[1].url, alice.c.User.ID, "live", alice.c.Token, nil); err != nil || code != http.StatusOK || v["sandbox"] != nowLive {
		t.Errorf("alice's live app through r2 once resumed: %d %v %v, want %s", code, v, err, nowLive)
	}

	// The load: readers of every user's live app and writers of files and secrets, each
	// going round the replicas still up.
	var (
		live       atomic.Pointer[[]*replica]
		mu         sync.Mutex
		log        []served
		acked      []string // "user file|secret id value"
		stopLoad   = make(chan struct{})
		wg         sync.WaitGroup
		n          atomic.Int64
		afterKill  atomic.Int64
		killed     atomic.Bool
		deadAnswer = make(chan string, 100)
	)
	live.Store(&rs)
	pick := func(i int) *replica { l := *live.Load(); return l[i%len(l)] }
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ; i++ {
				select {
				case <-stopLoad:
					return
				default:
				}
				u := users[i%len(users)]
				r := pick(i / len(users))
				began := time.Now()
				code, v, err := info(r.url, u.c.User.ID, "live", u.c.Token, nil)
				if err == nil && code == http.StatusOK {
					mu.Lock()
					log = append(log, served{user: u.c.User.Username, began: began, ended: time.Now(), sandbox: v["sandbox"], role: v["role"]})
					mu.Unlock()
					n.Add(1)
					if killed.Load() && u != carol {
						afterKill.Add(1)
					}
				}
				if killed.Load() && u == carol && err == nil {
					select {
					case deadAnswer <- fmt.Sprintf("%d %s (%s)", code, v["body"], time.Since(began).Round(time.Millisecond)):
					default:
					}
				}
				// A write through the next replica: a file in the user's first sandbox, or
				// a secret.
				r = pick(i/len(users) + 1)
				key := fmt.Sprintf("w%d-%d", w, i)
				var path string
				var body []byte
				var kind string
				if i%2 == 0 {
					kind, path, body = "file", "/api/v1/sandboxes/"+u.roles.Live.ID+"/files/content?path=load/"+key, []byte(key)
				} else {
					kind, path, body = "secret", "/api/v1/me/secrets/"+strings.ReplaceAll(key, "-", "_"), []byte(`{"value":"`+key+`"}`)
				}
				if code, _, err := tokenDo(ctx, r.url, u.c.Token, "PUT", path, body); err == nil && code == http.StatusOK {
					mu.Lock()
					acked = append(acked, u.c.User.Username+" "+kind+" "+key)
					mu.Unlock()
				}
			}
		}()
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for !ok() {
			if ctx.Err() != nil {
				close(stopLoad)
				wg.Wait()
				t.Fatalf("gave up waiting for %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Promotions in the middle, each through another replica, while the load runs.
	waitFor("the load to start", func() bool { return n.Load() >= 20 })
	for i := range 3 {
		before := n.Load()
		for j, u := range []*user{alice, bob, carol} {
			if err := promote(u, rs[(i+j)%3]); err != nil {
				t.Fatal(err)
			}
		}
		waitFor("requests after a promotion", func() bool { return n.Load() >= before+10 })
	}
	// SIGKILL the replica that runs carol's sandboxes, in the middle of the load.
	rs[2].kill()
	up := rs[:2]
	live.Store(&up)
	killed.Store(true)
	for i := range 3 {
		before := afterKill.Load()
		for j, u := range []*user{alice, bob} {
			if err := promote(u, up[(i+j)%2]); err != nil {
				t.Fatal(err)
			}
		}
		waitFor("requests after the kill and a promotion", func() bool { return afterKill.Load() >= before+10 })
	}
	// carol's app answers a 503 that names her sandboxes' replica, once it is known dead.
	waitFor("carol's app answering 503 naming r3", func() bool {
		select {
		case a := <-deadAnswer:
			return strings.HasPrefix(a, "503 ") && strings.Contains(a, "replica r3")
		default:
			return false
		}
	})
	close(stopLoad)
	wg.Wait()
	// A sandbox's record is the database's: any replica answers it, its own replica dead.
	for _, sb := range []api.Sandbox{carol.roles.Live, carol.roles.Dev} {
		var got api.Sandbox
		code, body, err := tokenDo(ctx, rs[0].url, carol.c.Token, "GET", "/api/v1/sandboxes/"+sb.ID, nil)
		if err != nil || code != http.StatusOK || json.Unmarshal(body, &got) != nil || got.ID != sb.ID || got.Role == "" {
			t.Errorf("carol's sandbox %s of the dead r3, through r1: %d %s %v, want its record with its role", sb.ID, code, body, err)
		}
	}

	// No request was served by the wrong role: each answer came from a live sandbox, the
	// one live when the request began, or one a promotion concurrent with it made live.
	byName := map[string]*user{}
	for _, u := range users {
		byName[u.c.User.Username] = u
	}
	for _, s := range log {
		u := byName[s.user]
		allowed := map[string]bool{}
		for _, p := range u.promoted {
			if p.began.IsZero() || p.acked.Before(s.began) {
				allowed = map[string]bool{p.live: true} // live when the request began
			}
		}
		for _, p := range u.promoted {
			if !p.began.IsZero() && p.began.Before(s.ended) && p.acked.After(s.began) {
				allowed[p.live] = true // made live by a promotion concurrent with it
			}
		}
		if s.role != "live" || !allowed[s.sandbox] {
			t.Errorf("%s's live host was served by %s as %q (began %s), want one of %v",
				s.user, s.sandbox, s.role, s.began.Format(time.RFC3339Nano), allowed)
		}
	}

	// Every acknowledged write reads back through another replica, once the killed one
	// is back (its sandboxes survived it, and it adopts them).
	rs[2].start(t)
	// The others read r3's heartbeat again within a fifth of the TTL: until then it may
	// still look dead to them.
	for _, via := range rs[:2] {
		for {
			code, body, err := tokenDo(ctx, via.url, carol.c.Token, "GET", "/api/v1/sandboxes/"+carol.roles.Live.ID+"/files/list?path=.", nil)
			if err == nil && code == http.StatusOK {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("carol's live sandbox through %s after r3 restarted: %d %s %v", via.id, code, body, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, a := range acked {
		f := strings.Fields(a)
		u, kind, key := byName[f[0]], f[1], f[2]
		via := rs[(len(key)+1)%3]
		var code int
		var body []byte
		if kind == "file" {
			code, body, err = tokenDo(ctx, via.url, u.c.Token, "GET", "/api/v1/sandboxes/"+u.roles.Live.ID+"/files/content?path=load/"+key, nil)
			if err == nil && code == http.StatusOK && string(body) != key {
				t.Errorf("file load/%s of %s reads %q through %s, want %q", key, u.c.User.Username, body, via.id, key)
			}
		} else {
			code, body, err = tokenDo(ctx, via.url, u.c.Token, "GET", "/api/v1/me/secrets", nil)
			if err == nil && !bytes.Contains(body, []byte(strings.ReplaceAll(key, "-", "_"))) {
				t.Errorf("secret %s of %s is not listed through %s: %s", key, u.c.User.Username, via.id, body)
			}
		}
		if err != nil || code != http.StatusOK {
			t.Errorf("acknowledged %s %s of %s through %s: %d %s %v", kind, key, u.c.User.Username, via.id, code, body, err)
		}
	}
	// A sandbox whose replica is dead can still be deleted, through another replica.
	rs[2].kill()
	for {
		code, body, err := tokenDo(ctx, rs[0].url, carol.c.Token, "GET", "/api/v1/sandboxes/"+carol.roles.Dev.ID+"/files/list?path=.", nil)
		if err == nil && code == http.StatusServiceUnavailable && bytes.Contains(body, []byte("has not been heard from")) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("carol's dev sandbox after r3 died again: %d %s %v, want 503 saying r3 is dead", code, body, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, body, err := tokenDo(ctx, rs[0].url, carol.c.Token, "DELETE", "/api/v1/sandboxes/"+carol.roles.Dev.ID, nil); err != nil || code != http.StatusNoContent {
		t.Errorf("delete carol's dev sandbox of the dead r3 through r1: %d %s %v, want 204", code, body, err)
	}
	rs[2].start(t)
	t.Logf("%d proxied requests answered, %d writes acknowledged and read back", len(log), len(acked))
}

// A replica's settings are checked at load, each mistake named.
func TestReplicaConfigChecked(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"replica: {id: r1, advertise: 10.0.0.1:8080}\n", "replica.id: replicas share a PostgreSQL database"},
		{"store: postgres://p@db/p\nreplica: {id: R_1, advertise: 10.0.0.1:8080}\n", `replica.id: "R_1"`},
		{"store: postgres://p@db/p\nreplica: {id: r1}\n", "replica.advertise"},
		{"store: postgres://p@db/p\nreplica: {id: r1, advertise: 10.0.0.1:0}\n", "replica.advertise"},
		{"store: postgres://p@db/p\nreplica: {id: r1, advertise: 10.0.0.1:8080, cluster_key_file: k}\n", "replica.cluster_key_file"},
		{"replica: {advertise: 10.0.0.1:8080}\n", "need an id"},
	} {
		config := filepath.Join(t.TempDir(), "paddock.yaml")
		if err := os.WriteFile(config, []byte(c.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := server.LoadConfig(config, t.TempDir(), "")
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("config %q: %v, want ErrInvalidArgument naming %q", c.yaml, err, c.want)
		}
	}
}
