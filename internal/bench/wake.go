package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/server"
)

// wakeFreezeAfter is idle.freeze_after in the wake table's control plane: short, so that a
// round waits little for the freeze, and long beside one request, so that the sandbox a
// round has just used runs while it is timed running.
const wakeFreezeAfter = time.Second

// WakeTable measures waking a stopped live sandbox (what idle suspend leaves) by a request
// through the proxy, to the first byte of its app's answer, against `paddock run -- true`.
func (e *Env) WakeTable(ctx context.Context, o Options) (t *Table, err error) {
	cp, err := e.startControlPlane(ctx, e.log, func(c *server.Config) { c.Idle.FreezeAfter = wakeFreezeAfter }, nil)
	if err != nil {
		return nil, err
	}
	defer cp.Close()
	var roles api.Roles
	if err := cp.JSON(ctx, "GET", "/api/v1/roles", nil, http.StatusOK, &roles); err != nil {
		return nil, err
	}
	live := roles.Live.ID
	sb, err := cp.Server.Fleet().Handle(ctx, fleet.Caller{Admin: true}, live)
	if err != nil {
		return nil, err
	}
	cgroup := sb.Cgroup() // the same for the sandbox's every start; Handle itself counts as a use
	rec := newRecorder()
	get := func(key string) error {
		req, err := http.NewRequestWithContext(ctx, "GET", cp.AppURL+"/", nil)
		if err != nil {
			return err
		}
		began := time.Now()
		resp, err := cp.Client.Do(req)
		if err != nil {
			return err
		}
		if key != "" {
			rec.add(key, ms(time.Since(began)))
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET / of the live app: %s", resp.Status)
		}
		return nil
	}
	// thaw times a request to the live sandbox once idle suspend has frozen it.
	thaw := func() error {
		if err := get(""); err != nil { // running, whatever the round before left
			return err
		}
		if err := waitFrozen(ctx, cgroup, 2*time.Minute); err != nil {
			return err
		}
		return get("thaw")
	}
	// running times the same request to the sandbox just used, so running.
	running := func() error {
		if err := get(""); err != nil {
			return err
		}
		return get("running")
	}
	wake := func() error {
		if err := cp.JSON(ctx, "POST", "/api/v1/sandboxes/"+live+"/stop", nil, http.StatusOK, nil); err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, "GET", cp.AppURL+"/", nil)
		if err != nil {
			return err
		}
		began := time.Now()
		resp, err := cp.Client.Do(req)
		if err != nil {
			return err
		}
		rec.add("wake", ms(time.Since(began)))
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("wake: %s", resp.Status)
		}
		return nil
	}
	run := func() error {
		began := time.Now()
		out, err := command(ctx, e.Paddock, "run", "--", "true").CombinedOutput()
		rec.add("run", ms(time.Since(began)))
		if err != nil {
			return fmt.Errorf("paddock run -- true: %v: %s", err, out)
		}
		return nil
	}
	if err := interleave(rec, 1, min(o.N, 10), wake, run, thaw, running); err != nil {
		return nil, err
	}
	w, r := rec.summary("wake"), rec.summary("run")
	th, rn := rec.summary("thaw"), rec.summary("running")
	return &Table{
		Title: "18. Wake: a request to a stopped live sandbox, to the first byte of its app",
		About: "A control plane on loopback (`server.New`), one signed-in user whose live sandbox runs the welcome app. Each round stops the " +
			"live sandbox through the API (untimed: what idle suspend does), then times `GET /` on the user's live apps host until the " +
			"response's first byte: the proxy starts the sandbox and holds the request until its app listens. The baseline is " +
			"`paddock run -- true` as a process, to its exit. *Thaw*: the control plane runs with `idle: {freeze_after: " + wakeFreezeAfter.String() + "}`; " +
			"the round waits (untimed) until idle suspend has frozen the live sandbox (its cgroup's freezer says so), then times the same `GET /` " +
			"to its response's first byte, against the same request to the same sandbox running (just used, untimed, then timed). Interleaved.",
		Rows: []Row{
			{Name: "wake → first byte", Unit: "ms", Summary: w, Ratio: ratio(w.P50, r.P50), Target: "≤ 1.5× paddock run", Met: yesNo(w.P50 <= 1.5*r.P50)},
			{Name: "`paddock run -- true`", Unit: "ms", Summary: r, Ratio: "1.00× (baseline)"},
			thawTarget.row(Row{Name: "thaw: a request to the frozen live sandbox → first byte", Unit: "ms", Summary: th}, rn.P50, ""),
			{Name: "the same request to the sandbox running", Unit: "ms", Summary: rn, Ratio: "1.00× (baseline)"},
		},
		Notes: []string{fmt.Sprintf("A frozen sandbox answers its first request %.2f ms after it was sent, against %.2f ms running (%s; target %s: %s), "+
			"where a wake from stopped takes %s as long: the proxy thaws the cgroup (one write to its freezer) before it forwards, and the app's process, its "+
			"memory kept, answers once the kernel has woken its threads. The absolute figures are information.",
			th.P50, rn.P50, ratio(th.P50, rn.P50), thawTarget, thawTarget.word(th.P50, rn.P50, ""), ratio(w.P50, th.P50))},
	}, nil
}

// thawTarget is table 18's thaw row's: a request that thaws a frozen sandbox against the
// same request to it running.
var thawTarget = atMost(5, "running")

// waitFrozen waits until the freezer of cgroup says frozen, for at most limit.
func waitFrozen(ctx context.Context, cgroup string, limit time.Duration) error {
	g, err := cgroups.Load(cgroup)
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(limit); ; {
		frozen, err := g.Frozen()
		if err != nil {
			return err
		}
		if frozen {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the idle live sandbox was not frozen within %s", limit)
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
