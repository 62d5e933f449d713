package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/paddockhq/paddock/internal/api"
)

// WakeTable measures waking a stopped live sandbox (what idle suspend leaves) by a request
// through the proxy, to the first byte of its app's answer, against `paddock run -- true`.
func (e *Env) WakeTable(ctx context.Context, o Options) (t *Table, err error) {
	cp, err := e.StartControlPlane(ctx, e.log)
	if err != nil {
		return nil, err
	}
	defer cp.Close()
	var roles api.Roles
	if err := cp.JSON(ctx, "GET", "/api/v1/roles", nil, http.StatusOK, &roles); err != nil {
		return nil, err
	}
	live := roles.Live.ID
	rec := newRecorder()
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
	if err := interleave(rec, 1, min(o.N, 10), wake, run); err != nil {
		return nil, err
	}
	w, r := rec.summary("wake"), rec.summary("run")
	return &Table{
		Title: "18. Wake: a request to a stopped live sandbox, to the first byte of its app",
		About: "A control plane on loopback (`server.New`), one signed-in user whose live sandbox runs the welcome app. Each round stops the " +
			"live sandbox through the API (untimed: what idle suspend does), then times `GET /` on the user's live apps host until the " +
			"response's first byte: the proxy starts the sandbox and holds the request until its app listens. The baseline is " +
			"`paddock run -- true` as a process, to its exit. Interleaved.",
		Rows: []Row{
			{Name: "wake → first byte", Unit: "ms", Summary: w, Ratio: ratio(w.P50, r.P50), Target: "≤ 1.5× paddock run", Met: yesNo(w.P50 <= 1.5*r.P50)},
			{Name: "`paddock run -- true`", Unit: "ms", Summary: r, Ratio: "1.00× (baseline)"},
		},
	}, nil
}
