package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/paddockhq/paddock/internal/api"
)

// proxyFixture is what the proxy's benchmarks share: a control plane with a signed-in user
// and the same app served directly on the host, both reached with one client.
type proxyFixture struct {
	cp     *ControlPlane
	direct *DirectApp
}

// proxied starts the fixture on first use; Env.Close stops it.
func (e *Env) proxied(ctx context.Context) (*proxyFixture, error) {
	if e.proxy != nil {
		return e.proxy, nil
	}
	cp, err := e.StartControlPlane(ctx, e.log)
	if err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	d, err := StartDirectApp(e.Agent)
	if err != nil {
		cp.Close()
		return nil, err
	}
	e.proxy = &proxyFixture{cp: cp, direct: d}
	return e.proxy, nil
}

// appCookie is the Cookie header the signed-in client sends to the live apps host.
func (f *proxyFixture) appCookie() (string, error) {
	u, err := url.Parse(f.cp.AppURL)
	if err != nil {
		return "", err
	}
	var pairs []string
	for _, c := range f.cp.Client.Jar.Cookies(u) {
		pairs = append(pairs, c.Name+"="+c.Value)
	}
	if len(pairs) == 0 {
		return "", fmt.Errorf("the client has no cookie for %s", f.cp.AppURL)
	}
	return strings.Join(pairs, "; "), nil
}

func (f *proxyFixture) Close() {
	f.direct.Close()
	f.cp.Close()
}

// call is one request of a load round.
type call struct {
	start, end time.Time
	err        error
}

// hammer runs c workers, each calling do back to back until d has passed, and returns
// every call and how long the round took (until the last call returned).
func hammer(c int, d time.Duration, do func() error) ([]call, time.Duration) {
	var (
		mu  sync.Mutex
		all []call
		wg  sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(d)
	for range c {
		wg.Go(func() {
			var mine []call
			for {
				s := time.Now()
				if !s.Before(deadline) {
					break
				}
				err := do()
				mine = append(mine, call{start: s, end: time.Now(), err: err})
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return all, time.Since(start)
}

// get requests url with hc, with cookie as its Cookie header unless it is "", and reads the
// whole answer, which must be a 200.
func get(hc *http.Client, url, cookie string) error {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return err
	}
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// loadStats sum up one load round.
type loadStats struct {
	rate     float64 // completed requests per second
	p50, p99 float64 // latency, ms
}

// loadRound hammers url with c clients for d; any failed request fails the round.
func loadRound(hc *http.Client, url, cookie string, c int, d time.Duration) (loadStats, error) {
	return callStats(hammer(c, d, func() error { return get(hc, url, cookie) }))
}

// callStats sum up the calls of a round that took elapsed; any failed call fails it.
func callStats(calls []call, elapsed time.Duration) (loadStats, error) {
	lat := make([]float64, 0, len(calls))
	for _, k := range calls {
		if k.err != nil {
			return loadStats{}, k.err
		}
		lat = append(lat, ms(k.end.Sub(k.start)))
	}
	if len(lat) == 0 {
		return loadStats{}, errors.New("no call completed in the round")
	}
	slices.Sort(lat)
	return loadStats{rate: float64(len(lat)) / elapsed.Seconds(), p50: quantile(lat, 0.5), p99: quantile(lat, 0.99)}, nil
}

// paired is the per-round difference a − b of two series taken in the same rounds.
func paired(rec *recorder, a, b string) Summary {
	xa, xb := rec.series[a], rec.series[b]
	var d []float64
	for i := range min(len(xa), len(xb)) {
		d = append(d, xa[i]-xb[i])
	}
	return Summarize(d)
}

// ProxyLoadTable compares GET /api/info through the control plane's proxy into the live
// sandbox with the same request straight to the same app on the host.
func (e *Env) ProxyLoadTable(ctx context.Context, o Options) (*Table, error) {
	f, err := e.proxied(ctx)
	if err != nil {
		return nil, err
	}
	// Every variant's requests carry the same Cookie header, the apps host's: the client does
	// the same work whichever it loads, and the peers have a cookie to strip, as paddock's
	// proxy does. (A cookie jar would add its look-up to the proxied requests alone.)
	hc := &http.Client{Transport: f.cp.Client.Transport, Timeout: f.cp.Client.Timeout}
	cookie, err := f.appCookie()
	if err != nil {
		return nil, err
	}
	rec := newRecorder()
	variant := func(name, url string, c int) func() error {
		return func() error {
			d := o.ProxyRound
			if !rec.on {
				d = min(d, time.Second) // warm-up: keep-alive connections, the tunnel's streams
			}
			s, err := loadRound(hc, url, cookie, c, d)
			rec.add(name+".rate", s.rate)
			rec.add(name+".p50", s.p50)
			rec.add(name+".p99", s.p99)
			return err
		}
	}
	c := o.ProxyClients
	upstream := strings.TrimPrefix(f.direct.URL, "http://")
	peers := []*reverseProxy{e.startReverseProxy(ctx, "nginx", upstream), e.startReverseProxy(ctx, "haproxy", upstream)}
	defer func() {
		for _, p := range peers {
			p.Close()
		}
	}()
	fns := []func() error{
		variant("direct", f.direct.URL+"/api/info", c),
		variant("proxy", f.cp.AppURL+"/api/info", c),
		variant("direct1", f.direct.URL+"/api/info", 1),
		variant("proxy1", f.cp.AppURL+"/api/info", 1),
	}
	for _, p := range peers {
		fns = append(fns, p.round(variant(p.name, p.URL+"/api/info", c)), p.round(variant(p.name+"1", p.URL+"/api/info", 1)))
	}
	// The same load from wrk, a process of its own: direct, through the proxy (its address
	// with the apps host's name as Host), and through each peer that runs.
	w := newWrk()
	app, err := url.Parse(f.cp.AppURL)
	if err != nil {
		return nil, err
	}
	wrkVariant := func(name, target, host string, skip *peer) func() error {
		return w.peer.round(func() error {
			if skip != nil && skip.missing != "" {
				return nil
			}
			d := o.ProxyRound
			if !rec.on {
				d = min(d, time.Second)
			}
			s, err := w.round(ctx, target, host, cookie, c, d)
			rec.add("wrk."+name+".rate", s.rate)
			rec.add("wrk."+name+".p99", s.p99)
			return err
		})
	}
	fns = append(fns, wrkVariant("direct", f.direct.URL+"/api/info", "", nil),
		wrkVariant("proxy", "http://127.0.0.1:"+app.Port()+"/api/info", app.Host, nil))
	for _, p := range peers {
		fns = append(fns, wrkVariant(p.name, p.URL+"/api/info", "", p.peer))
	}
	if err := interleave(rec, 1, o.ProxyRounds, fns...); err != nil {
		return nil, err
	}
	pr, dr := rec.summary("proxy.rate"), rec.summary("direct.rate")
	p50, d50 := rec.summary("proxy.p50"), rec.summary("direct.p50")
	p99, d99 := rec.summary("proxy.p99"), rec.summary("direct.p99")
	added := paired(rec, "proxy.p99", "direct.p99")
	s50, sd50 := rec.summary("proxy1.p50"), rec.summary("direct1.p50")
	s99, sd99 := rec.summary("proxy1.p99"), rec.summary("direct1.p99")
	sAdded := paired(rec, "proxy1.p50", "direct1.p50")
	cs := fmt.Sprintf("C=%d", c)
	// The targets are nginx's figures in the same rounds: its ratio to direct, and its added
	// p99 with 0.2 ms of slack.
	nginx := peers[0]
	nr, na99 := rec.summary("nginx.rate"), paired(rec, "nginx.p99", "direct.p99")
	rateTarget, rateMet, rateWord := "≥ nginx's ratio", "—", "not judged, nginx not measured"
	p99Target, p99Met, p99Word := "≤ nginx's + 0.2 ms", "—", rateWord
	if nginx.missing == "" {
		rateTarget = fmt.Sprintf("≥ nginx's ratio (%s)", ratio(nr.P50, dr.P50))
		rateMet, rateWord = yesNo(pr.P50 >= nr.P50), metWord(pr.P50 >= nr.P50)
		p99Target = fmt.Sprintf("≤ nginx's + 0.2 ms (%.2f ms)", na99.P50+0.2)
		p99Met, p99Word = yesNo(added.P50 <= na99.P50+0.2), metWord(added.P50 <= na99.P50+0.2)
	}
	t := &Table{
		Title: "5. HTTP through the control plane's proxy against the app reached directly",
		About: fmt.Sprintf("`GET /api/info` (a small JSON answer) of the welcome app, the app every sandbox runs by default. *Through the proxy*: "+
			"a real control plane (server.New, serving on loopback) with one signed-in user; the request goes to the user's live apps host "+
			"with the cookie the handoff gave it: client → control plane (apps host, cookie and session, role lookup) → proxy → a kept-alive TCP connection "+
			"to the app's port on the sandbox's loopback, which the control plane dials in the sandbox's network namespace (the container tier under runc; "+
			"the other tiers go through a tunnel over the agent's channel) → app inside the user's live container sandbox. The proxy sends a request without a body to the app itself, on a pooled connection from the handler's goroutine "+
			"(others go through net/http's Transport). *Direct*: the same app code (welcome.Serve) on a host loopback port. The same Go HTTP client (keep-alive, "+
			"a connection per worker) sends both, from the harness's process, which also hosts the control plane, with the same Cookie header "+
			"(the apps host's) on every variant's requests, so that the client's work is the same and the peers have a cookie to strip. Each round, %s concurrent "+
			"clients send requests back to back for %s, and one client (C=1) does the same; the four variants, and the peers' below, are interleaved over %d rounds "+
			"after a short warm-up. Rates are completed requests per second of a round; p50 and p99 are the latencies of all requests of a round; "+
			"every row is the median (p90, min) over the rounds. The *added* rows are the per-round difference proxy − direct.",
			cs, o.ProxyRound, o.ProxyRounds),
		Rows: []Row{
			{Name: "through the proxy: requests/s (" + cs + ")", Unit: "req/s", Summary: pr, Ratio: ratio(pr.P50, dr.P50), Target: rateTarget, Met: rateMet},
			{Name: "direct: requests/s (" + cs + ")", Unit: "req/s", Summary: dr, Ratio: "1.00× (baseline)"},
			{Name: "through the proxy: p50 latency (" + cs + ")", Unit: "ms", Summary: p50, Ratio: ratio(p50.P50, d50.P50)},
			{Name: "direct: p50 latency (" + cs + ")", Unit: "ms", Summary: d50, Ratio: "1.00× (baseline)"},
			{Name: "through the proxy: p99 latency (" + cs + ")", Unit: "ms", Summary: p99, Ratio: ratio(p99.P50, d99.P50)},
			{Name: "direct: p99 latency (" + cs + ")", Unit: "ms", Summary: d99, Ratio: "1.00× (baseline)"},
			{Name: "*added* p99 latency, proxy − direct (" + cs + ")", Unit: "ms", Summary: added, Target: p99Target, Met: p99Met},
			{Name: "through the proxy: p50 latency (C=1, serial)", Unit: "ms", Summary: s50, Ratio: ratio(s50.P50, sd50.P50)},
			{Name: "direct: p50 latency (C=1, serial)", Unit: "ms", Summary: sd50, Ratio: "1.00× (baseline)"},
			{Name: "through the proxy: p99 latency (C=1, serial)", Unit: "ms", Summary: s99, Ratio: ratio(s99.P50, sd99.P50)},
			{Name: "direct: p99 latency (C=1, serial)", Unit: "ms", Summary: sd99, Ratio: "1.00× (baseline)"},
			{Name: "*added* p50 latency, proxy − direct (C=1, serial)", Unit: "ms", Summary: sAdded},
		},
	}
	var vs []string
	for _, p := range peers {
		r, l99, l1 := rec.summary(p.name+".rate"), rec.summary(p.name+".p99"), rec.summary(p.name+"1.p50")
		a99 := paired(rec, p.name+".p99", "direct.p99")
		t.Rows = append(t.Rows,
			p.row(Row{Name: "*peer:* through " + p.name + ": requests/s (" + cs + ")", Unit: "req/s", Summary: r, Ratio: vsPeer(r.P50, dr.P50, "direct", pr.P50)}),
			p.row(Row{Name: "*peer:* through " + p.name + ": p99 latency (" + cs + ")", Unit: "ms", Summary: l99, Ratio: vsPeer(l99.P50, d99.P50, "direct", p99.P50)}),
			p.row(Row{Name: "*added* p99 latency, " + p.name + " (peer) − direct (" + cs + ")", Unit: "ms", Summary: a99}),
			p.row(Row{Name: "*peer:* through " + p.name + ": p50 latency (C=1, serial)", Unit: "ms", Summary: l1, Ratio: vsPeer(l1.P50, sd50.P50, "direct", s50.P50)}))
		if p.missing != "" {
			vs = append(vs, fmt.Sprintf("%s not measured (%s)", p.name, p.missing))
			continue
		}
		vs = append(vs, fmt.Sprintf("%s serves %.0f requests/s (%s of direct; paddock's proxy %s of it) and adds %.2f ms to the p99", p.name, r.P50, ratio(r.P50, dr.P50), ratio(pr.P50, r.P50), a99.P50))
	}
	wr, wd := rec.summary("wrk.proxy.rate"), rec.summary("wrk.direct.rate")
	wa99 := paired(rec, "wrk.proxy.p99", "wrk.direct.p99")
	wn := rec.summary("wrk.nginx.rate")
	wrkTarget, wrkMet := "≥ nginx's ratio", "—"
	if w.missing == "" && nginx.missing == "" {
		wrkTarget, wrkMet = fmt.Sprintf("≥ nginx's ratio (%s)", ratio(wn.P50, wd.P50)), yesNo(wr.P50 >= wn.P50)
	}
	t.Rows = append(t.Rows,
		w.row(Row{Name: "*wrk:* through the proxy: requests/s (" + cs + ")", Unit: "req/s", Summary: wr, Ratio: ratio(wr.P50, wd.P50), Target: wrkTarget, Met: wrkMet}),
		w.row(Row{Name: "*wrk:* direct: requests/s (" + cs + ")", Unit: "req/s", Summary: wd, Ratio: "1.00× (baseline)"}),
		w.row(Row{Name: "*added* p99 latency under wrk, proxy − direct (" + cs + ")", Unit: "ms", Summary: wa99}))
	for _, p := range peers {
		wp := rec.summary("wrk." + p.name + ".rate")
		r := w.row(p.row(Row{Name: "*wrk:* *peer:* through " + p.name + ": requests/s (" + cs + ")", Unit: "req/s", Summary: wp, Ratio: vsPeer(wp.P50, wd.P50, "direct", wr.P50)}))
		a := w.row(p.row(Row{Name: "*added* p99 latency under wrk, " + p.name + " (peer) − direct (" + cs + ")", Unit: "ms", Summary: paired(rec, "wrk."+p.name+".p99", "wrk.direct.p99")}))
		t.Rows = append(t.Rows, r, a)
	}
	t.About += fmt.Sprintf(" The *wrk* rows are the same C=%d load from Debian's wrk (`wrk -t2 -c%d --latency`, the same Cookie header; the apps host's "+
		"name as its Host header, to the control plane's address), a process of its own rather than goroutines of the harness, whose process "+
		"also hosts the control plane; their p99 is wrk's, their ratio column as above.", c, c)
	t.About += " The *peer* rows put " + reverseProxiesAbout + " They are driven by the same client in the same rounds; their ratio column is the peer against direct, then paddock's proxy against the peer."
	t.Notes = []string{
		fmt.Sprintf("With %s clients the proxy serves %.0f requests/s against %.0f direct (%s; target %s: %s), and adds %.2f ms to the p99 "+
			"(%.2f ms against %.2f ms; target %s: %s). A single client waits %.2f ms per request through the proxy against %.2f ms direct. "+
			"The targets are nginx's figures in the same rounds; the absolute ones are information, as they follow the machine's load.",
			cs, pr.P50, dr.P50, ratio(pr.P50, dr.P50), rateTarget, rateWord, added.P50, p99.P50, d99.P50,
			p99Target, p99Word, s50.P50, sd50.P50),
		fmt.Sprintf("The comparison is not of equal work: a direct request is one HTTP exchange with the app (the same `paddock-agent welcome` binary, as its own process on a host port), while a proxied one is "+
			"that exchange with the control plane plus a session lookup and the role's owner, and a second HTTP exchange with the app in the sandbox, "+
			"all on the same %s cores as the client. "+
			"At saturation the ratio is a ratio of CPU per request.", e.DescribeMachine().Cores),
		fmt.Sprintf("With %s the two cores are saturated, so a p99 is mostly time spent waiting for a CPU: the direct app's own p99 is %.0f× its p50. "+
			"To see where the control plane's time goes, run `go run ./internal/bench/cmd -only \"proxy load\" -cpuprofile cpu.prof` and "+
			"`go tool pprof`: the harness's process hosts the control plane (the agent and the app run in the sandbox, in processes of their own).",
			cs, d99.P50/max(d50.P50, 1e-9)),
		"Against the peers, in front of the same app, with " + cs + ": " + strings.Join(vs, "; ") + ". A peer does less than paddock's proxy: no session " +
			"lookup, no role lookup, no header scrubbing beyond the two headers.",
	}
	if w.missing == "" {
		t.Notes = append(t.Notes, fmt.Sprintf("Loaded by wrk instead, from a process of its own: the proxy serves %.0f requests/s against %.0f direct (%s) "+
			"and nginx %.0f (%s; paddock's proxy %s of it). wrk's p99 is noisier than the Go client's: compare the rates.", wr.P50, wd.P50, ratio(wr.P50, wd.P50), wn.P50, ratio(wn.P50, wd.P50), ratio(wr.P50, wn.P50)))
	} else {
		t.Notes = append(t.Notes, "wrk not measured: "+w.missing+".")
	}
	return t, nil
}

// metWord says whether a target was met, in a sentence.
func metWord(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

// echoRound opens one WebSocket to url and times n sequential echoes of size bytes.
func echoRound(ctx context.Context, hc *http.Client, url string, n, size int) ([]float64, error) {
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", url, err)
	}
	defer ws.CloseNow()
	msg := make([]byte, size)
	lat := make([]float64, 0, n)
	for i := range n {
		msg[0] = byte(i)
		start := time.Now()
		if err := ws.Write(ctx, websocket.MessageBinary, msg); err != nil {
			return nil, err
		}
		_, got, err := ws.Read(ctx)
		if err != nil {
			return nil, err
		}
		lat = append(lat, ms(time.Since(start)))
		if len(got) != size || got[0] != byte(i) {
			return nil, fmt.Errorf("echo %d: %d bytes back, want %d", i, len(got), size)
		}
	}
	ws.Close(websocket.StatusNormalClosure, "")
	slices.Sort(lat)
	return lat, nil
}

// ProxyEchoTable compares a WebSocket echo round trip through the proxy with the same
// echo of the app reached directly.
func (e *Env) ProxyEchoTable(ctx context.Context, o Options) (*Table, error) {
	f, err := e.proxied(ctx)
	if err != nil {
		return nil, err
	}
	rec := newRecorder()
	variant := func(name, url string) func() error {
		return func() error {
			lat, err := echoRound(ctx, f.cp.Client, url, o.EchoN, o.EchoBytes)
			if err != nil {
				return err
			}
			rec.add(name+".p50", quantile(lat, 0.5))
			rec.add(name+".p99", quantile(lat, 0.99))
			return nil
		}
	}
	nginx := e.startReverseProxy(ctx, "nginx", strings.TrimPrefix(f.direct.URL, "http://"))
	defer nginx.Close()
	err = interleave(rec, 1, o.ProxyRounds, variant("direct", f.direct.URL+"/ws/echo"), variant("proxy", f.cp.AppURL+"/ws/echo"),
		nginx.round(variant("nginx", nginx.URL+"/ws/echo")))
	if err != nil {
		return nil, err
	}
	p50, d50 := rec.summary("proxy.p50"), rec.summary("direct.p50")
	p99, d99 := rec.summary("proxy.p99"), rec.summary("direct.p99")
	n50, n99 := rec.summary("nginx.p50"), rec.summary("nginx.p99")
	t := &Table{
		Title: "6. WebSocket echo round trip through the proxy against the app reached directly",
		About: fmt.Sprintf("One WebSocket to the welcome app's `/ws/echo`, opened with the signed-in user's client; %d binary messages of %d bytes "+
			"sent one at a time, each timed from Write to the Read of its echo. Through the proxy the WebSocket is terminated by the control plane and "+
			"its messages relayed on a second WebSocket to the app in the live sandbox (dialed in its network namespace, as in table 5); direct, it is the same app on the host. %d rounds of each, interleaved, after "+
			"a warm-up round; p50 and p99 are over a round's messages, rows are the median over rounds. The *peer* rows are Debian's nginx "+
			"in front of the direct app, as table 5 configures it (its WebSocket proxying: `Upgrade` passed on, `Connection: upgrade`), "+
			"in the same rounds with the same client; their ratio column is nginx against direct, then paddock's proxy against nginx.",
			o.EchoN, o.EchoBytes, o.ProxyRounds),
		Rows: []Row{
			{Name: "through the proxy: echo p50", Unit: "ms", Summary: p50, Ratio: ratio(p50.P50, d50.P50)},
			{Name: "direct: echo p50", Unit: "ms", Summary: d50, Ratio: "1.00× (baseline)"},
			{Name: "through the proxy: echo p99", Unit: "ms", Summary: p99, Ratio: ratio(p99.P50, d99.P50)},
			{Name: "direct: echo p99", Unit: "ms", Summary: d99, Ratio: "1.00× (baseline)"},
			{Name: "*added* echo p50, proxy − direct", Unit: "ms", Summary: paired(rec, "proxy.p50", "direct.p50")},
			{Name: "*added* echo p99, proxy − direct", Unit: "ms", Summary: paired(rec, "proxy.p99", "direct.p99")},
			nginx.row(Row{Name: "*peer:* through nginx: echo p50", Unit: "ms", Summary: n50, Ratio: vsPeer(n50.P50, d50.P50, "direct", p50.P50)}),
			nginx.row(Row{Name: "*peer:* through nginx: echo p99", Unit: "ms", Summary: n99, Ratio: vsPeer(n99.P50, d99.P50, "direct", p99.P50)}),
			nginx.row(Row{Name: "*added* echo p50, nginx (peer) − direct", Unit: "ms", Summary: paired(rec, "nginx.p50", "direct.p50")}),
		},
		Notes: []string{
			fmt.Sprintf("An echo takes %.3f ms through the proxy and %.3f ms direct at the median (%s); the proxy adds %.3f ms per round trip "+
				"(%.3f ms at p99): each message is read, checked and written again by the control plane.",
				p50.P50, d50.P50, ratio(p50.P50, d50.P50), p50.P50-d50.P50, p99.P50-d99.P50),
		},
	}
	if nginx.missing != "" {
		t.Notes = append(t.Notes, "nginx not measured: "+nginx.missing+".")
	} else {
		t.Notes = append(t.Notes, fmt.Sprintf("Through nginx an echo takes %.3f ms at the median (%s of direct; paddock's proxy %s of it) and %.3f ms at p99 "+
			"(paddock's %s of it). nginx relays the frames' bytes between two TCP connections without parsing them; paddock's proxy terminates the "+
			"WebSocket (it must close the ones a promotion leaves behind) and writes each message again on its own WebSocket to the app.",
			n50.P50, ratio(n50.P50, d50.P50), ratio(p50.P50, n50.P50), n99.P50, ratio(p99.P50, n99.P50)))
	}
	return t, nil
}

// promoteStats sum up one promotion-under-load round.
type promoteStats struct {
	requests, failed, checked, wrong, swaps int
	longestGap, slowest                     time.Duration
	promote                                 []float64 // each POST /api/v1/promote, ms
	errs                                    []string  // the first few failures
}

// promoteRound hammers /api/info through the proxy with c clients for d while the user is
// promoted every `every` (never, if every is 0: the baseline).
func (f *proxyFixture) promoteRound(ctx context.Context, c int, d, every time.Duration) (promoteStats, error) {
	var roles api.Roles
	if err := f.cp.JSON(ctx, "GET", "/api/v1/roles", nil, http.StatusOK, &roles); err != nil {
		return promoteStats{}, err
	}
	// owners[g] is the live sandbox after the g-th acknowledged swap of the round. issued
	// counts swaps sent, acked those answered: a request that starts with issued == acked
	// and sees issued unchanged when it ends overlapped no swap, so only owners[acked] may
	// answer it.
	var (
		mu             sync.Mutex
		owners         = []string{roles.Live.ID}
		issued, acked  atomic.Int64
		checked, wrong atomic.Int64
		st             promoteStats
	)
	owner := func(g int64) string {
		mu.Lock()
		defer mu.Unlock()
		return owners[g]
	}
	url := f.cp.AppURL + "/api/info"
	done := make(chan error, 1)
	go func() {
		if every == 0 {
			done <- nil
			return
		}
		deadline := time.Now().Add(d)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			<-tick.C
			if time.Now().After(deadline.Add(-every / 2)) {
				done <- nil
				return
			}
			issued.Add(1)
			start := time.Now()
			r, err := f.cp.Promote(ctx)
			if err != nil {
				done <- fmt.Errorf("promote: %w", err)
				return
			}
			mu.Lock()
			st.promote = append(st.promote, ms(time.Since(start)))
			owners = append(owners, r.Live.ID)
			g := int64(len(owners) - 1)
			mu.Unlock()
			acked.Store(g)
		}
	}()
	calls, _ := hammer(c, d, func() error {
		g := acked.Load()
		i0 := issued.Load()
		got, err := servedBy(ctx, f.cp.Client, url)
		if err != nil {
			return err
		}
		if i0 == g && issued.Load() == i0 {
			checked.Add(1)
			if want := owner(g); got != want {
				wrong.Add(1)
				return fmt.Errorf("%w: served by %s, the live sandbox since swap %d is %s", errWrongOwner, got, g, want)
			}
		}
		return nil
	})
	if err := <-done; err != nil {
		return st, err
	}
	st.requests, st.checked, st.wrong, st.swaps = len(calls), int(checked.Load()), int(wrong.Load()), len(st.promote)
	var ends []time.Time
	for _, k := range calls {
		st.slowest = max(st.slowest, k.end.Sub(k.start))
		if k.err != nil && !errors.Is(k.err, errWrongOwner) {
			st.failed++
			if len(st.errs) < 3 {
				st.errs = append(st.errs, k.err.Error())
			}
			continue
		}
		ends = append(ends, k.end)
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(ends); i++ {
		st.longestGap = max(st.longestGap, ends[i].Sub(ends[i-1]))
	}
	return st, nil
}

var errWrongOwner = errors.New("answered by the previous owner")

// PromoteTable promotes a user again and again while clients keep requesting the live
// sandbox's app through the proxy.
func (e *Env) PromoteTable(ctx context.Context, o Options) (*Table, error) {
	f, err := e.proxied(ctx)
	if err != nil {
		return nil, err
	}
	var (
		requests, failed, checked, wrong, swaps, gap, slowest, promote []float64
		errs                                                           []string
		baseGap, baseSlowest                                           []float64
		baseFailed                                                     int
	)
	for round := range o.PromoteRounds {
		// Each round is paired with one of the same load without promotions, in alternating
		// order (A B, B A, …), so that promotions' stalls can be told from this machine's own.
		var s, base promoteStats
		for i := range 2 {
			var err error
			if (round+i)%2 == 0 {
				s, err = f.promoteRound(ctx, o.ProxyClients, o.PromoteFor, o.PromoteEvery)
			} else {
				base, err = f.promoteRound(ctx, o.ProxyClients, o.PromoteFor, 0)
			}
			if err != nil {
				return nil, err
			}
		}
		baseGap, baseSlowest = append(baseGap, ms(base.longestGap)), append(baseSlowest, ms(base.slowest))
		baseFailed += base.failed
		errs = append(errs, base.errs...)
		requests = append(requests, float64(s.requests))
		failed = append(failed, float64(s.failed))
		checked = append(checked, float64(s.checked))
		wrong = append(wrong, float64(s.wrong))
		swaps = append(swaps, float64(s.swaps))
		gap = append(gap, ms(s.longestGap))
		slowest = append(slowest, ms(s.slowest))
		promote = append(promote, s.promote...)
		errs = append(errs, s.errs...)
	}
	totalFailed, totalWrong := sum(failed), sum(wrong)
	gs, ss := Summarize(gap), Summarize(slowest)
	t := &Table{
		Title: "7. Promotion under load",
		About: fmt.Sprintf("%d clients of the signed-in user send `GET /api/info` through the proxy back to back for %s while the harness "+
			"promotes the user (`POST /api/v1/promote`, which swaps the live and dev sandboxes) every %s; %d such rounds. Every answer "+
			"names the sandbox that served it. A request *failed* if it got an error or a status other than 200. A request is *served by the "+
			"previous owner* if it started after a swap's response had arrived, no further swap was sent before it ended, and yet it was "+
			"answered by a sandbox other than the live one after that swap (requests that overlap a swap may be answered by either). The "+
			"*longest gap* is the longest time between two consecutive completed responses of all clients together; the *slowest request* "+
			"is the longest single request. Rows are per round: median (p90, min) over the rounds; the targets count every round. "+
			"Every round is paired with a round of the same load and length without promotions, in alternating order.",
			o.ProxyClients, o.PromoteFor, o.PromoteEvery, o.PromoteRounds),
		Rows: []Row{
			{Name: "requests through the proxy per round", Unit: "count", Summary: Summarize(requests)},
			{Name: "promotions acknowledged per round", Unit: "count", Summary: Summarize(swaps)},
			{Name: "failed requests", Unit: "count", Summary: Summarize(failed), Target: "none", Met: yesNo(totalFailed == 0)},
			{Name: "requests that overlapped no swap (checked for their owner)", Unit: "count", Summary: Summarize(checked)},
			{Name: "…of which served by the previous owner", Unit: "count", Summary: Summarize(wrong), Target: "none", Met: yesNo(totalWrong == 0)},
			{Name: "longest gap between consecutive responses", Unit: "ms", Summary: gs},
			{Name: "slowest single request", Unit: "ms", Summary: ss},
			{Name: "*for comparison:* longest gap, the same load without promotions", Unit: "ms", Summary: Summarize(baseGap), Ratio: ratio(gs.P50, Summarize(baseGap).P50)},
			{Name: "*for comparison:* slowest single request, the same load without promotions", Unit: "ms", Summary: Summarize(baseSlowest), Ratio: ratio(ss.P50, Summarize(baseSlowest).P50)},
			{Name: "`POST /api/v1/promote` latency", Unit: "ms", Summary: Summarize(promote)},
		},
	}
	t.Notes = []string{
		fmt.Sprintf("Over %d rounds, %.0f requests and %.0f promotions: %.0f failed (target none: %s) and %.0f of the %.0f checked were answered by "+
			"the previous owner (target none: %s). The longest stall was %.1f ms without any response (median over rounds %.1f ms), and the "+
			"slowest single request took %.1f ms (median over rounds %.1f ms); a promotion itself takes %.1f ms at the median.",
			o.PromoteRounds, sum(requests), sum(swaps), totalFailed, metWord(totalFailed == 0), totalWrong, sum(checked), metWord(totalWrong == 0),
			slices.Max(gap), gs.P50, slices.Max(slowest), ss.P50, Summarize(promote).P50),
		fmt.Sprintf("The same load without promotions, in rounds alternating with these, had a longest gap of %.1f ms and a slowest request of "+
			"%.1f ms at the median (%d failed): a ratio near 1× or below means promotions add no stall beyond this machine's own.",
			Summarize(baseGap).P50, Summarize(baseSlowest).P50, baseFailed),
	}
	if len(errs) > 0 {
		t.Notes = append(t.Notes, "First failures: "+strings.Join(errs, "; ")+".")
	}
	return t, nil
}

func sum(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}
