package proxy

import (
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the CPU time (user and system) the test's process has used: the client, the
// proxy and the app all run in it, so that a variant's figure per request is what it costs
// whatever else loads the machine.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkProxyOverhead compares a GET through the proxy with the same GET straight to
// the app, and with the proxy's requests sent by http.Transport instead of its direct path
// (proxy-nethttp). It is a quick check; internal/bench measures the real thing. On a shared
// machine compare cpu-ns/op, the process's CPU time per request, rather than ns/op.
func BenchmarkProxyOverhead(b *testing.B) {
	h := newHarness(b, Options{})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	run := func(b *testing.B, url string) {
		b.ReportAllocs()
		before := cpuTime(b)
		defer func() { b.ReportMetric(float64(cpuTime(b)-before)/float64(b.N), "cpu-ns/op") }()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				res, err := client.Get(url)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != 200 {
					b.Fatal(res.Status)
				}
			}
		})
	}
	b.Run("direct", func(b *testing.B) { run(b, h.router.live.srv.URL+"/") })
	b.Run("proxy", func(b *testing.B) { run(b, h.front.URL+"/") })
	b.Run("proxy-nethttp", func(b *testing.B) {
		h.p.rp.Transport = h.p.tr
		defer func() { h.p.rp.Transport = h.p.direct }()
		run(b, h.front.URL+"/")
	})
}
