package bench

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/store/pgtest"
)

// ReplicasTable compares two control-plane replicas sharing one PostgreSQL database with
// one control plane on SQLite, under the same load: GET /api/info through the proxy to the
// user's live app, and GET /api/v1/sandboxes/{id} of the API.
func (e *Env) ReplicasTable(ctx context.Context, o Options) (*Table, error) {
	pg, err := pgtest.Shared()
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL: %w", err)
	}
	dbURL, drop, err := pg.NewDatabase(ctx)
	if err != nil {
		return nil, err
	}
	defer drop()
	one, err := e.StartControlPlane(ctx, e.log)
	if err != nil {
		return nil, fmt.Errorf("control plane on SQLite: %w", err)
	}
	defer one.Close()

	keys, err := os.MkdirTemp(e.Dir, "replicas-")
	if err != nil {
		return nil, err
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	clusterKey := filepath.Join(keys, "cluster.key")
	if err := os.WriteFile(clusterKey, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		return nil, err
	}
	var addrs [2]string
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addrs[i] = l.Addr().String()
		l.Close()
	}
	replica := func(i int) func(*server.Config) {
		return func(cfg *server.Config) {
			cfg.Listen, cfg.Store = addrs[i], dbURL
			cfg.SecretsKeyFile = filepath.Join(keys, "secrets.key")
			cfg.Replica = server.ReplicaConfig{ID: fmt.Sprintf("r%d", i+1), Advertise: addrs[i], ClusterKeyFile: clusterKey}
		}
	}
	// The first replica signs the user up and makes their sandboxes; the second serves
	// the same user, forwarding what is the first's sandboxes'.
	r1, err := e.startControlPlaneWith(ctx, e.log, replica(0), server.Options{}, nil)
	if err != nil {
		return nil, fmt.Errorf("replica 1: %w", err)
	}
	defer r1.Close()
	r2, err := e.startBare(ctx, e.log, replica(1), server.Options{})
	if err != nil {
		return nil, fmt.Errorf("replica 2: %w", err)
	}
	defer r2.Close()
	// A load balancer in front of both: the same URLs, the same cookies, every other
	// request to the second replica.
	viaR2 := &http.Client{Jar: r1.Client.Jar, Timeout: time.Minute, Transport: &http.Transport{
		MaxIdleConns: 256, MaxIdleConnsPerHost: 128, IdleConnTimeout: time.Minute, DisableCompression: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{Timeout: 30 * time.Second}).DialContext(ctx, network, addrs[1])
		}}}
	live := func(cp *ControlPlane) (string, error) {
		var roles api.Roles
		err := cp.JSON(ctx, "GET", "/api/v1/roles", nil, http.StatusOK, &roles)
		return roles.Live.ID, err
	}
	oneLive, err := live(one)
	if err != nil {
		return nil, err
	}
	twoLive, err := live(r1)
	if err != nil {
		return nil, err
	}
	rec := newRecorder()
	c := o.ProxyClients
	variant := func(name string, clients []*http.Client, url string) func() error {
		return func() error {
			d := o.ProxyRound
			if !rec.on {
				d = min(d, time.Second)
			}
			var n atomic.Int64
			calls, elapsed := hammer(c, d, func() error { return get(clients[int(n.Add(1))%len(clients)], url, "") })
			for _, k := range calls {
				if k.err != nil {
					return fmt.Errorf("%s: %w", name, k.err)
				}
			}
			rec.add(name, float64(len(calls))/elapsed.Seconds())
			return nil
		}
	}
	both := []*http.Client{r1.Client, viaR2}
	if err := interleave(rec, 1, o.ProxyRounds,
		variant("one.proxy", []*http.Client{one.Client}, one.AppURL+"/api/info"),
		variant("two.proxy", both, r1.AppURL+"/api/info"),
		variant("two.proxy.first", []*http.Client{r1.Client}, r1.AppURL+"/api/info"),
		variant("two.proxy.second", []*http.Client{viaR2}, r1.AppURL+"/api/info"),
		variant("one.api", []*http.Client{one.Client}, one.URL+"/api/v1/sandboxes/"+oneLive),
		variant("two.api", both, r1.URL+"/api/v1/sandboxes/"+twoLive),
	); err != nil {
		return nil, err
	}
	op, tp := rec.summary("one.proxy"), rec.summary("two.proxy")
	oa, ta := rec.summary("one.api"), rec.summary("two.api")
	tp1, tp2 := rec.summary("two.proxy.first"), rec.summary("two.proxy.second")
	cs := fmt.Sprintf("C=%d", c)
	return &Table{
		Title: "21. Two control-plane replicas on PostgreSQL against one on SQLite",
		About: fmt.Sprintf("The same load on two set-ups, each a real control plane (server.New, serving on loopback) in the harness's process with one "+
			"signed-in user whose live and dev container sandboxes run the welcome app. *One on SQLite*: one control plane, its database a "+
			"SQLite file. *Two on PostgreSQL*: two replicas (`replica:` set, their own data and state dirs) sharing one PostgreSQL database "+
			"(Debian's, on a unix socket); the first made the user's sandboxes, and every other request goes to the second, as a load balancer "+
			"in front of both would send it: the second forwards the API's requests for the first's sandboxes over the replicas' authenticated hop, "+
			"and hands an apps host's client connection on to the first, whole. *Proxy*: "+
			"`GET /api/info` on the user's live apps host with the handoff's cookie. *API*: `GET /api/v1/sandboxes/{id}` of the live sandbox "+
			"with the session cookie. The *breakdown* rows send every proxied request to one replica of the two. Each round, %s keep-alive clients send "+
			"requests back to back for %s; the six variants are interleaved "+
			"over %d rounds after a short warm-up; rows are completed requests per second, median (p90, min) over the rounds.", cs, o.ProxyRound, o.ProxyRounds),
		Rows: []Row{
			{Name: "two replicas on PostgreSQL: proxy requests/s (" + cs + ")", Unit: "req/s", Summary: tp, Ratio: ratio(tp.P50, op.P50), Target: "≥ 0.9× one on SQLite", Met: yesNo(tp.P50 >= 0.9*op.P50)},
			{Name: "one on SQLite: proxy requests/s (" + cs + ")", Unit: "req/s", Summary: op, Ratio: "1.00× (baseline)"},
			{Name: "*breakdown:* two replicas: proxy, every request to the first, which runs the sandbox (" + cs + ")", Unit: "req/s", Summary: tp1, Ratio: ratio(tp1.P50, op.P50)},
			{Name: "*breakdown:* two replicas: proxy, every request to the second, its connections handed on (" + cs + ")", Unit: "req/s", Summary: tp2, Ratio: ratio(tp2.P50, op.P50)},
			{Name: "two replicas on PostgreSQL: API requests/s (" + cs + ")", Unit: "req/s", Summary: ta, Ratio: ratio(ta.P50, oa.P50), Target: "≥ 0.9× one on SQLite", Met: yesNo(ta.P50 >= 0.9*oa.P50)},
			{Name: "one on SQLite: API requests/s (" + cs + ")", Unit: "req/s", Summary: oa, Ratio: "1.00× (baseline)"},
		},
		Notes: []string{
			fmt.Sprintf("Through the proxy two replicas on PostgreSQL serve %.0f requests/s against %.0f for one on SQLite (%s; target ≥ 0.9×: %s); "+
				"the API %.0f against %.0f (%s; target ≥ 0.9×: %s).",
				tp.P50, op.P50, ratio(tp.P50, op.P50), metWord(tp.P50 >= 0.9*op.P50), ta.P50, oa.P50, ratio(ta.P50, oa.P50), metWord(ta.P50 >= 0.9*oa.P50)),
			fmt.Sprintf("Split by replica, the proxy serves %.0f requests/s when every request goes to the first replica, which runs the sandbox (%s of one on "+
				"SQLite), and %.0f when every request goes to the second, which hands its connections on to the first (%s): what the second "+
				"replica's relay costs is the gap between those two, and the first row's gap to one on SQLite is the replica's own, on PostgreSQL.",
				tp1.P50, ratio(tp1.P50, op.P50), tp2.P50, ratio(tp2.P50, op.P50)),
			"Both replicas, PostgreSQL and the client share this machine's cores, so the second replica adds no CPU: the comparison is of the work " +
				"per request. With replicas, each replica caches the users' roles and sessions (kept exact by numbered notifications) and the apps " +
				"host's cookies, so a proxied request reads nothing from PostgreSQL. A client connection that reaches the second replica is handed " +
				"on to the first, which runs the sandbox: the second authenticates its first request, opens a connection to the first, and from then " +
				"on relays the connection's bytes both ways without parsing them (read and written, or by splice(2) in bulk); the first serves the connection as " +
				"one of its own. " +
				"What half of the proxied requests still cost beyond one replica's work is that relay: one more loopback TCP connection, crossed " +
				"by the request and by the response, and a wake-up of one of the second replica's goroutines for each. The API's request for a " +
				"sandbox's record is answered by whichever replica it reaches: the record is read from PostgreSQL, the session and the role from " +
				"the caches.",
			"To run this table alone: `make build`, then, as root, `go run ./internal/bench/cmd -only replicas`.",
		},
	}, nil
}
