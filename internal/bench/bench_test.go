package bench

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/store/pgtest"
	"github.com/paddockhq/paddock/internal/testenv"
)

// newEnv is an Env over the binaries built from this checkout.
func newEnv(t testing.TB) *Env {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.Binary(t, "paddock-agent")
	e, err := NewEnv(filepath.Dir(testenv.Binary(t, "paddock")), testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// TestRunOnce takes one sample of every measurement, so that the harness `make bench` runs
// is known to work without taking its minutes.
func TestRunOnce(t *testing.T) {
	e := newEnv(t)
	o := Options{N: 1, Quick: true, StreamN: 1, StreamBytes: 8 << 20, Sandboxes: 1, Idle: 10 * time.Millisecond,
		ProxyClients: 2, ProxyRound: 200 * time.Millisecond, ProxyRounds: 1, EchoN: 20, EchoBytes: 32,
		PromoteRounds: 1, PromoteFor: time.Second, PromoteEvery: 250 * time.Millisecond, EgressRounds: 1, EgressBytes: 8 << 20}
	r, err := Run(context.Background(), e, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Tables) != 24 {
		t.Fatalf("%d tables, want 24", len(r.Tables))
	}
	checkPeers(t, e, r)
	for _, tb := range r.Tables {
		for _, row := range tb.Rows {
			if row.Missing != "" {
				continue // checkPeers says whether it may be
			}
			if row.N < 1 || row.N != 1 && !strings.Contains(row.Name, "promote") && !strings.Contains(tb.Title, "gateway") && !strings.Contains(tb.Title, "history") && !(strings.HasPrefix(tb.Title, "20.") && row.N == hmrEdits) || row.P50 <= 0 && row.Unit != "MiB" && row.Unit != "count" && !strings.HasPrefix(row.Name, "*added*") {
				t.Errorf("%s: %s: %+v, want one positive sample", tb.Title, row.Name, row.Summary)
			}
		}
	}
	var md bytes.Buffer
	r.WriteMarkdown(&md)
	for _, want := range []string{"make bench", "| measurement |", "**Peers.**", "*peer:* `podman run --rm`", "*peer:* through nginx", "*peer:* HTTPS through squid", "≤ 1.5× runc run", "≤ 0.25× runc exec", "≥ 0.5× the floor", "≤ 4.5× podman", "≤ 1.5× the floor", "≤ 1.5× the bare boot", "≤ 1.15× the bare boot", "≤ 2× the parse", "≤ 3× the hand-written check", "≤ 5× the HMAC chain", "≤ 0.4× a plain file server", "≤ 1.2× an idle sandbox's agent", "≤ 5× running", "*floor:* through `httputil.ReverseProxy`: first byte", "≥ nginx's ratio", "≤ nginx's + 0.2 ms", "*wrk:* through the proxy", "*wrk:* *peer:* through nginx", "*peer:* through nginx: echo p50", "≥ the best peer's ratio", "Promotion under load", "× the floor", "*floor:* the same writes alone", "provider gateway", "egress proxy", "≤ 1.2× net/http", "p50 ≤ 2× exec", "≤ 0.1× cp -a", "≤ 1.5× paddock run", "≤ 1.3× Vite direct", "≤ 1.3× the floor", "≥ 0.9× one on SQLite", "≤ 1.5× plain GetObject", "23. Kubernetes", "24. Kubernetes scale (KWOK)"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// checkPeers checks that every peer has its rows in its table, measured, unless its
// program is missing here, which the test says.
func checkPeers(t *testing.T, e *Env, r *Report) {
	t.Helper()
	runsc := e.newRunscPeer()
	for _, p := range []struct{ table, name, bin string }{
		{"1. ", "`runsc run`", runsc.bin}, {"1. ", "`bwrap`", "bwrap"}, {"1. ", "`podman run --rm`", "podman"},
		{"5. ", "nginx", "nginx"}, {"5. ", "haproxy", "haproxy"}, {"5. ", "*wrk:* through the proxy", "wrk"}, {"5. ", "*wrk:* direct", "wrk"}, {"6. ", "nginx", "nginx"},
		{"13. ", "squid", "squid"}, {"13. ", "tinyproxy", "tinyproxy"},
		{"3. ", "*floor:*", "sh"}, {"3. ", "`podman run --rm`", "podman"}, {"4. ", "podman's idle container", "podman"},
		{"11. ", "*floor:* bare QEMU", "qemu-system-x86_64"},
		{"12. ", "*floor:*", "go"}, {"15. ", "*floor:*", "chromium"}, {"18. ", "thaw:", "go"},
	} {
		var rows []Row
		for _, tb := range r.Tables {
			if strings.HasPrefix(tb.Title, p.table) {
				for _, row := range tb.Rows {
					if strings.Contains(row.Name, p.name) {
						rows = append(rows, row)
					}
				}
			}
		}
		if len(rows) == 0 {
			t.Errorf("table %s has no row of peer %s", p.table, p.name)
			continue
		}
		for _, row := range rows {
			_, wrkErr := exec.LookPath("wrk")
			switch _, err := exec.LookPath(p.bin); {
			case row.Missing != "" && err != nil:
				t.Logf("skipping peer %s: %s is not installed here (%s)", p.name, p.bin, row.Missing)
			case row.Missing != "" && strings.Contains(row.Name, "wrk") && wrkErr != nil:
				t.Logf("skipping %s: wrk is not installed here (%s)", row.Name, row.Missing)
			case row.Missing != "":
				t.Errorf("%s: %s is installed, but the row says: not measured: %s", row.Name, p.bin, row.Missing)
			case row.N != 1 || row.P50 <= 0 && !strings.HasPrefix(row.Name, "*added*"):
				t.Errorf("%s: %+v, want one positive sample", row.Name, row.Summary)
			}
		}
	}
}

// BenchmarkCreateFirstByte times `paddock run -- echo hi` and a bare `runc run` of its
// bundle. ns/op is a whole iteration (with the baseline's bundle writing and removal);
// first-byte-ms is the figure to compare.
func BenchmarkCreateFirstByte(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	b.Run("paddock", func(b *testing.B) {
		var first time.Duration
		for b.Loop() {
			t, err := e.PaddockRun(ctx)
			if err != nil {
				b.Fatal(err)
			}
			first += t.First
		}
		b.ReportMetric(ms(first)/float64(b.N), "first-byte-ms")
	})
	b.Run("runc", func(b *testing.B) {
		var first time.Duration
		for b.Loop() {
			t, _, err := e.RuncRun(ctx)
			if err != nil {
				b.Fatal(err)
			}
			first += t.First
		}
		b.ReportMetric(ms(first)/float64(b.N), "first-byte-ms")
	})
}

// BenchmarkExec times a round trip of `true` through the agent and through `runc exec`
// into the same running sandbox.
func BenchmarkExec(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	s, err := e.StartExecSandbox(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Destroy(context.Background()) })
	for _, v := range []struct {
		name string
		exec func(context.Context) (time.Duration, error)
	}{{"agent", s.AgentExec}, {"runc", s.RuncExec}} {
		b.Run(v.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := v.exec(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkProxyVsDirect sends GET /api/info of the welcome app from 4×GOMAXPROCS
// concurrent keep-alive clients, straight to the app on the host and through a real
// control plane's proxy into a live sandbox. ns/op is the inverse of throughput.
func BenchmarkProxyVsDirect(b *testing.B) {
	e := newEnv(b)
	f, err := e.proxied(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range []struct{ name, url string }{{"direct", f.direct.URL}, {"proxy", f.cp.AppURL}} {
		b.Run(v.name, func(b *testing.B) {
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := get(f.cp.Client, v.url+"/api/info", ""); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// TestClientTable takes samples of the Go client's table alone.
func TestClientTable(t *testing.T) {
	e := newEnv(t)
	r, err := Run(context.Background(), e, Options{N: 2, Only: "go client"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Tables) != 1 || len(r.Tables[0].Rows) != 5 {
		t.Fatalf("tables %+v", r.Tables)
	}
	for _, row := range r.Tables[0].Rows {
		if row.N != 2 || row.P50 <= 0 {
			t.Errorf("%s: %+v, want two positive samples", row.Name, row.Summary)
		}
	}
	var md bytes.Buffer
	r.WriteMarkdown(&md)
	t.Log(md.String())
}

// TestReplicasTable takes samples of the replicas' table alone: two replicas on
// PostgreSQL and one control plane on SQLite under the same load.
func TestReplicasTable(t *testing.T) {
	e := newEnv(t)
	r, err := Run(context.Background(), e, Options{Only: "replicas", ProxyClients: 2, ProxyRound: 300 * time.Millisecond, ProxyRounds: 2})
	if errors.Is(err, pgtest.ErrAbsent) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Tables) != 1 || len(r.Tables[0].Rows) != 6 {
		t.Fatalf("tables %+v", r.Tables)
	}
	for _, row := range r.Tables[0].Rows {
		if row.N != 2 || row.P50 <= 0 {
			t.Errorf("%s: %+v, want two positive samples", row.Name, row.Summary)
		}
	}
}

// TestPoolForkWakeTables takes samples of the warm pool's, the fork's and the wake's
// tables alone.
func TestPoolForkWakeTables(t *testing.T) {
	e := newEnv(t)
	for _, only := range []string{"warm pool", "fork", "wake"} {
		t.Run(only, func(t *testing.T) {
			r, err := Run(context.Background(), e, Options{N: 2, Quick: true, Only: only})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Tables) != 1 {
				t.Fatalf("tables %+v", r.Tables)
			}
			onXFS := 0
			for _, row := range r.Tables[0].Rows {
				if row.N != 2 || row.P50 <= 0 {
					t.Errorf("%s: %+v, want two positive samples", row.Name, row.Summary)
				}
				if strings.Contains(row.Name, "on XFS") {
					onXFS++
				}
			}
			if only == "fork" && onXFS != 2 {
				t.Errorf("the fork's table has %d rows on XFS, want the fork's and cp -a's: %s", onXFS, r.Tables[0].Notes)
			}
		})
	}
}

// TestAgentTable takes samples of the coding agent's table alone.
func TestAgentTable(t *testing.T) {
	e := newEnv(t)
	r, err := Run(context.Background(), e, Options{N: 2, Only: "coding agent"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Tables) != 1 || len(r.Tables[0].Rows) != 6 {
		t.Fatalf("tables %+v", r.Tables)
	}
	for _, row := range r.Tables[0].Rows {
		if row.N != 2 || row.P50 <= 0 {
			t.Errorf("%s: %+v, want two positive samples", row.Name, row.Summary)
		}
	}
	if turn := r.Tables[0].Rows[1]; turn.Min < 100 {
		t.Errorf("the provider's time in a turn, %v ms, is under its fixed 100 ms", turn.Min)
	}
}

// TestProvidersOnce runs the providers table alone, one round: every row is one positive
// sample (hmrEdits of them for an HMR edit's rows), each against its peer of the same run.
func TestProvidersOnce(t *testing.T) {
	e := newEnv(t)
	r, err := Run(context.Background(), e, Options{Only: "providers", Warmup: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Tables) != 1 || !strings.HasPrefix(r.Tables[0].Title, "20. Runtime providers") {
		t.Fatalf("tables %+v, want the providers table alone", r.Tables)
	}
	for _, row := range r.Tables[0].Rows {
		want := 1
		if !strings.Contains(row.Name, "scaffold") && !strings.Contains(row.Name, "build") && !strings.Contains(row.Name, "the same steps") && !strings.Contains(row.Name, "the same commands") {
			want = hmrEdits
		}
		if row.N != want || row.P50 <= 0 || row.Ratio == "" {
			t.Errorf("%s: %+v %q, want %d positive samples and a ratio", row.Name, row.Summary, row.Ratio, want)
		}
	}
}
