package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/paddockhq/paddock/internal/sandbox/kube/kubetest"
	testkube "github.com/paddockhq/paddock/internal/testenv/kube"
)

const kubeScaleTitle = "24. Kubernetes scale (KWOK): 1,000 sandboxes created at 50/s to Ready, against the same Sandboxes created raw through client-go"

// kubeScaleN and kubeScaleRounds are the scale run: 1,000 sandboxes each way, one
// round each (a round takes minutes on a small machine).
const (
	kubeScaleN      = 1000
	kubeScaleRounds = 1
)

// KubeScaleTable creates sandboxes at 50/s on KWOK's simulated nodes of the test cluster
// (internal/testenv/kube) through paddock's Kubernetes backend, and the same Sandboxes
// raw through client-go, in interleaved rounds; each round waits until all are Ready and
// then deletes them all.
func (e *Env) KubeScaleTable(ctx context.Context, o Options) (t *Table, err error) {
	n, rounds := kubeScaleN, kubeScaleRounds
	if o.Quick {
		n, rounds = 50, 1
	}
	if m := testkube.Missing(); m != "" {
		return kubeScaleMissing("no test cluster: missing " + m), nil
	}
	if m := testkube.KWOKMissing(); m != "" {
		return kubeScaleMissing("no KWOK: missing " + m), nil
	}
	c, err := testkube.Start(ctx, testkube.Options{})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, c.Stop()) }()
	if err := kubetest.PrepareScale(ctx, c, n); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(e.Dir, "kube-scale-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cfg := kubetest.ScaleConfig(c, dir)
	rec := newRecorder()
	rec.on = true
	watches := 0
	for round := range rounds {
		var raw, pdk kubetest.ScaleRound
		// Each goes first in every other round: what the first leaves the cluster to
		// digest (the last round's deletions) falls on both alike.
		for _, first := range []bool{round%2 == 0, round%2 == 1} {
			var err error
			if first {
				raw, err = kubetest.RawRound(ctx, c, cfg, n, e.log)
			} else {
				pdk, err = kubetest.PaddockRound(ctx, c, cfg, n, e.log)
			}
			if err != nil {
				return nil, err
			}
		}
		for name, ds := range map[string][]time.Duration{"raw": raw.Ready, "paddock": pdk.Ready} {
			xs := make([]float64, len(ds))
			for i, d := range ds {
				xs[i] = ms(d)
			}
			rec.add(name+".p50", quantileOf(xs, 0.5))
			rec.add(name+".p99", quantileOf(xs, 0.99))
		}
		watches = max(watches, pdk.Watches)
	}
	s := rec.summary
	p50, p99, r50, r99 := s("paddock.p50"), s("paddock.p99"), s("raw.p50"), s("raw.p99")
	gate := p99.N > 0 && p99.P50 <= 2000
	return &Table{
		Title: kubeScaleTitle,
		About: fmt.Sprintf("The test cluster (internal/testenv/kube: a real kube-apiserver, etcd, scheduler, controller-manager and the agent-sandbox "+
			"controller %s) with KWOK's simulated nodes, whose pods KWOK reports Running and Ready with an address, as a kubelet would, but never runs: "+
			"no agent answers there, so what is measured is the Sandbox's Ready condition (with its pod's address) as the creator's informer sees it, "+
			"not a first exec. *paddock*: %s sandboxes created through paddock's Kubernetes backend (`kube.Cluster.Place`: the channel's certificate "+
			"and Secret, the Sandbox, the Secret handed to it, the wait on the backend's one shared informer), placed on the simulated nodes by "+
			"`runner.node_selector` and `runner.tolerations`, each due at 50/s and timed from when it was due (a creator that falls behind is "+
			"counted) to Ready. *raw client-go*: the same Sandbox objects (kube.NewSandbox's, workspace volume claim included; no Secret) created "+
			"at the same rate by client-go's typed client, Ready seen by a client-go informer of the harness's own: the floor. Each round "+
			"waits for all to be Ready, then deletes them all and waits until nothing of them is left (volumes included); %d rounds of each, "+
			"interleaved (each first in every other round); p50 and p99 are over a round's sandboxes, rows the median over rounds.", testkube.AgentSandboxVersion, grouped(n), rounds),
		Rows: []Row{
			{Name: "paddock: created → Ready p50", Unit: "ms", Summary: p50, Ratio: ratio(p50.P50, r50.P50)},
			{Name: "paddock: created → Ready p99", Unit: "ms", Summary: p99, Ratio: ratio(p99.P50, r99.P50), Target: "≤ 2 s", Met: yesNo(gate)},
			{Name: "*floor:* raw client-go: created → Ready p50", Unit: "ms", Summary: r50, Ratio: "1.00× (baseline)"},
			{Name: "*floor:* raw client-go: created → Ready p99", Unit: "ms", Summary: r99, Ratio: "1.00× (baseline)"},
		},
		Notes: []string{
			fmt.Sprintf("%s sandboxes created at 50/s through paddock reach Ready with a p99 of %.0f ms (the issue's gate, ≤ 2 s: %s), %s the "+
				"same Sandboxes created raw (p99 %.0f ms); at the median %.0f ms against %.0f ms (%s).",
				grouped(n), p99.P50, metWord(gate), ratio(p99.P50, r99.P50), r99.P50, p50.P50, r50.P50, ratio(p50.P50, r50.P50)),
			fmt.Sprintf("With every sandbox of a round running, the API server held %d more watches on Sandboxes than before it: the backend's "+
				"one shared informer, not one watch per sandbox.", watches),
			"What paddock adds to the floor is its own requests (a Secret made, then handed to the Sandbox: three writes where the floor makes one) " +
				"and a certificate issued per sandbox; the rest of the time is the controller's, the scheduler's and the volume claims' provisioning, " +
				"on the same two cores as the harness.",
			"On the test cluster each sandbox's pod waits, Pending, until the controller-manager's volume controller has bound its workspace claim (the in-tree hostPath provisioner), and the floor's waits the same: that, and the machine's load, is most of both figures, not the creator.",
			"To run this table alone: `make build`, then, as root, `go run ./internal/bench/cmd -only kwok`.",
		},
	}, nil
}

func kubeScaleMissing(why string) *Table {
	return &Table{Title: kubeScaleTitle, Rows: []Row{
		{Name: "paddock: created → Ready p99", Missing: why, Target: "≤ 2 s"},
	}}
}
