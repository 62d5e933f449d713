package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/egress"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/provider"
	"github.com/paddockhq/paddock/internal/provider/npmregistry"
	"github.com/paddockhq/paddock/internal/server"
)

// PoolTable measures a sandbox claimed from the warm pool, from the create request to its
// first exec's result, against an exec round trip in a sandbox already running, both over
// the API; a create the pool does not match (it starts a sandbox anew) is information.
func (e *Env) PoolTable(ctx context.Context, o Options) (t *Table, err error) {
	cp, err := e.startControlPlane(ctx, e.log, func(c *server.Config) { c.Pool.Size = 1 }, nil)
	if err != nil {
		return nil, err
	}
	closeCP := sync.OnceFunc(cp.Close)
	defer closeCP()
	var tok api.Token
	if err := cp.JSON(ctx, "POST", "/api/v1/tokens", api.CreateTokenRequest{Name: "bench"}, http.StatusCreated, &tok); err != nil {
		return nil, err
	}
	hc := &http.Client{}
	// The exec baseline runs in the user's live sandbox: no disk more than the user has.
	var roles api.Roles
	if err := cp.JSON(ctx, "GET", "/api/v1/roles", nil, http.StatusOK, &roles); err != nil {
		return nil, err
	}
	running := roles.Live.ID
	rec := newRecorder()
	hits, claims := 0, 0
	create := func(name string, req api.CreateSandboxRequest) func() error {
		return func() error {
			if err := cp.waitPool(ctx, 1); err != nil {
				return err
			}
			before := cp.poolHits()
			began := time.Now()
			id, err := createAndExec(ctx, hc, cp.URL, tok.Secret, req)
			rec.add(name, ms(time.Since(began)))
			if err != nil {
				return err
			}
			if name == "claim" {
				claims++
				if cp.poolHits() > before {
					hits++
				}
			}
			return cp.JSON(context.WithoutCancel(ctx), "DELETE", "/api/v1/sandboxes/"+id, nil, http.StatusNoContent, nil)
		}
	}
	n := min(o.N, 20)
	err = interleave(rec, 1, n,
		create("claim", api.CreateSandboxRequest{}),
		func() error {
			if err := cp.waitPool(ctx, 1); err != nil {
				return err
			}
			began := time.Now()
			err := bareExec(ctx, hc, cp.URL, tok.Secret, running)
			rec.add("exec", ms(time.Since(began)))
			return err
		},
		create("cold", api.CreateSandboxRequest{Env: []string{"BENCH=cold"}}),
	)
	if err != nil {
		return nil, err
	}
	c, x, cold := rec.summary("claim"), rec.summary("exec"), rec.summary("cold")
	closeCP() // the node rows start control planes of their own
	tmplRows, tmplNote, err := e.poolTemplateRows(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("the node template pool: %w", err)
	}
	c99, x99 := p99(rec.series["claim"]), p99(rec.series["exec"])
	return &Table{
		Title: "16. Warm pool: create → first exec result of a sandbox claimed from the pool",
		About: "A control plane on loopback (`server.New`) with `pool: {size: 1}`, one API token, a bare `net/http` client. " +
			"Claim → first exec is `POST /api/v1/sandboxes` (the default app, so it matches the pool) and then " +
			"`POST /api/v1/sandboxes/{id}/exec` of `true`, timed from the create's request to the exec's result, once the pool " +
			"holds a sandbox (waited for untimed before every round of each row: no round meets a refill it did not cause); the baseline " +
			"is the same exec in the user's live sandbox, already running " +
			"(table 2's round trip, over the API). A create with an environment of its own does not match the pool and starts a sandbox " +
			"anew: information. Interleaved; each created sandbox is deleted untimed.",
		Rows: []Row{
			{Name: "claim → first exec", Unit: "ms", Summary: c, Ratio: ratio(c.P50, x.P50), Target: "p50 ≤ 2× exec, p99 ≤ 5× exec",
				Met: yesNo(c.P50 <= 2*x.P50 && c99 <= 5*x99)},
			{Name: "exec round trip in a running sandbox", Unit: "ms", Summary: x, Ratio: "1.00× (baseline)"},
			{Name: "create anew → first exec (no pool)", Unit: "ms", Summary: cold, Ratio: ratio(cold.P50, x.P50)},
			tmplRows[0], tmplRows[1], tmplRows[2],
		},
		Notes: []string{
			fmt.Sprintf("p99: claim → first exec %.1f ms, exec %.2f ms (%s); %d of %d creates of the default app (warm-up included) came from the pool.", c99, x99, ratio(c99, x99), hits, claims),
			tmplNote,
		},
	}, nil
}

// p99 is the 99th percentile of xs (with few samples, near the largest).
func p99(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return quantileOf(xs, 0.99)
}

// createAndExec creates a sandbox through the API and runs `true` in it; it returns the
// sandbox's ID.
func createAndExec(ctx context.Context, hc *http.Client, base, token string, req api.CreateSandboxRequest) (string, error) {
	body, _ := json.Marshal(req)
	r, err := http.NewRequestWithContext(ctx, "POST", base+"/api/v1/sandboxes", strings.NewReader(string(body)))
	if err != nil {
		return "", err
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(r)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var sb api.Sandbox
	if err := json.NewDecoder(resp.Body).Decode(&sb); err != nil || resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("create: %s: %v", resp.Status, err)
	}
	return sb.ID, bareExec(ctx, hc, base, token, sb.ID)
}

// waitPool waits until the control plane's pool holds n sandboxes.
func (cp *ControlPlane) waitPool(ctx context.Context, n int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for cp.metric(`paddock_pool_size{template="default"}`) != float64(n) {
		if time.Now().After(deadline) {
			return errors.New("the warm pool did not refill within 2 minutes")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func (cp *ControlPlane) poolHits() float64 {
	return cp.metric(`paddock_pool_claims_total{result="hit",template="default"}`)
}

// metric is the value of one sample of the control plane's metrics, or -1.
func (cp *ControlPlane) metric(name string) float64 {
	rec := httptest.NewRecorder()
	cp.Server.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err == nil {
				return v
			}
		}
	}
	return -1
}

// poolTemplateRows times `app new --runtime node` in the user's live sandbox when it takes
// the node template pool's member, against the same step resolving the dependencies
// itself (npm ci from a loopback registry) with the user's npm cache removed first (cold)
// and kept (warm), on two control planes with the same policy, interleaved.
func (e *Env) poolTemplateRows(ctx context.Context, o Options) (rows []Row, note string, err error) {
	mirror, err := npmMirror()
	if err != nil {
		return nil, "", err
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := npmregistry.Fill(fctx, mirror, provider.NodeTemplateLock); err != nil {
		return nil, "", fmt.Errorf("filling the npm mirror %s from %s (needed once): %w", mirror, npmregistry.Upstream, err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	reg := &http.Server{Handler: npmregistry.Handler(mirror), ReadHeaderTimeout: 10 * time.Second}
	go reg.Serve(lis)
	defer reg.Close()
	port := lis.Addr().(*net.TCPAddr).Port
	dir, err := os.MkdirTemp(e.Dir, "pool-template-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(dir)
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte("network:\n  default: deny\n  allow: [\""+npmHost+"\"]\n"), 0o600); err != nil {
		return nil, "", err
	}
	opts := server.Options{Egress: egress.Options{Resolver: loopback{}, HTTPPorts: []uint16{uint16(port)},
		UnsafeAllowAddrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, DialTimeout: 5 * time.Second}}
	registry := fmt.Sprintf("http://%s:%d/", npmHost, port)
	fixture := func(pool bool) (*providersFixture, error) {
		cp, err := e.startControlPlaneWith(ctx, e.log, func(c *server.Config) {
			c.NetworkPolicy = pol
			if pool {
				c.Pool = fleet.PoolConfig{Templates: map[string]int{"node": 1}, Env: []string{"npm_config_registry=" + registry}}
			}
		}, opts, nil)
		if err != nil {
			return nil, err
		}
		f := &providersFixture{cp: cp}
		var roles api.Roles
		if err := cp.JSON(ctx, "GET", "/api/v1/roles", nil, http.StatusOK, &roles); err != nil {
			cp.Close()
			return nil, err
		}
		f.live = roles.Live.ID
		return f, nil
	}
	pooled, err := fixture(true)
	if err != nil {
		return nil, "", fmt.Errorf("control plane with the node pool: %w", err)
	}
	defer pooled.cp.Close()
	plain, err := fixture(false)
	if err != nil {
		return nil, "", fmt.Errorf("control plane without a pool: %w", err)
	}
	defer plain.cp.Close()
	const size, hitsOf = `paddock_pool_size{template="node"}`, `paddock_pool_claims_total{result="hit",template="node"}`
	rec := newRecorder()
	round, hits, claims := 0, 0, 0
	newIn := func(f *providersFixture, name string, clearCache bool) func() error {
		return func() error {
			round++
			d := fmt.Sprintf("site-%d", round)
			clear := `rm -rf site-*`
			if clearCache {
				clear += ` "${npm_config_cache:-$HOME/.npm}"`
			}
			var res api.ExecResult
			if err := f.cp.JSON(ctx, "POST", "/api/v1/sandboxes/"+f.live+"/exec", api.ExecRequest{Argv: []string{"sh", "-c", clear}, TimeoutMS: 120000}, http.StatusOK, &res); err != nil {
				return err
			}
			if err := f.put(ctx, f.live, d+"/.npmrc", "registry="+registry+"\n"); err != nil {
				return err
			}
			before := 0.0
			if name == "pool" {
				deadline := time.Now().Add(10 * time.Minute)
				for f.cp.metric(size) != 1 {
					if time.Now().After(deadline) {
						return errors.New("the node template pool did not refill within 10 minutes")
					}
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(100 * time.Millisecond):
					}
				}
				before = f.cp.metric(hitsOf)
			}
			began := time.Now()
			err := f.step(ctx, f.live, "new", api.ProviderRequest{Runtime: "node", Name: "bench-site", Dir: d})
			rec.add(name, ms(time.Since(began)))
			if name == "pool" {
				claims++
				if f.cp.metric(hitsOf) > before {
					hits++
				}
			}
			return err
		}
	}
	n := min(o.N, 5)
	if err := interleave(rec, 1, n, newIn(pooled, "pool", true), newIn(plain, "cold", true), newIn(plain, "warm", false)); err != nil {
		return nil, "", err
	}
	p, c, w := rec.summary("pool"), rec.summary("cold"), rec.summary("warm")
	return []Row{
			{Name: "`app new --runtime node` taking the node template pool's member", Unit: "ms", Summary: p, Ratio: ratio(p.P50, c.P50)},
			{Name: "`app new --runtime node` resolving itself (`npm ci`), npm cache removed first", Unit: "ms", Summary: c, Ratio: "1.00× (baseline)"},
			{Name: "`app new --runtime node` resolving itself, npm cache warm", Unit: "ms", Summary: w, Ratio: ratio(w.P50, c.P50)},
		}, fmt.Sprintf("%d of %d `app new` from the node pool (warm-up included) took a member. The node rows: two more control planes with "+
			"the same network policy (only a loopback npm registry, the template's packages, through the egress proxy), one with "+
			"`pool: {templates: {node: 1}}`; each round is `POST …/app/new` over SSE to its result in the user's live sandbox, the last "+
			"round's project removed first (untimed), and for the pooled one the pool refilled first (untimed).", hits, claims), nil
}
