package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/api"
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
	defer cp.Close()
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
	c99, x99 := p99(rec.series["claim"]), p99(rec.series["exec"])
	return &Table{
		Title: "16. Warm pool: create → first exec result of a sandbox claimed from the pool",
		About: "A control plane on loopback (`server.New`) with `pool: {size: 1}`, one API token, a bare `net/http` client. " +
			"Claim → first exec is `POST /api/v1/sandboxes` (the default app, so it matches the pool) and then " +
			"`POST /api/v1/sandboxes/{id}/exec` of `true`, timed from the create's request to the exec's result, once the pool " +
			"holds a sandbox (waited for untimed); the baseline is the same exec in the user's live sandbox, already running " +
			"(table 2's round trip, over the API). A create with an environment of its own does not match the pool and starts a sandbox " +
			"anew: information. Interleaved; each created sandbox is deleted untimed.",
		Rows: []Row{
			{Name: "claim → first exec", Unit: "ms", Summary: c, Ratio: ratio(c.P50, x.P50), Target: "p50 ≤ 2× exec, p99 ≤ 5× exec",
				Met: yesNo(c.P50 <= 2*x.P50 && c99 <= 5*x99)},
			{Name: "exec round trip in a running sandbox", Unit: "ms", Summary: x, Ratio: "1.00× (baseline)"},
			{Name: "create anew → first exec (no pool)", Unit: "ms", Summary: cold, Ratio: ratio(cold.P50, x.P50)},
		},
		Notes: []string{
			fmt.Sprintf("p99: claim → first exec %.1f ms, exec %.2f ms (%s); %d of %d creates of the default app (warm-up included) came from the pool.", c99, x99, ratio(c99, x99), hits, claims),
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
