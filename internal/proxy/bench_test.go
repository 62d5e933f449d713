package proxy

import (
	"io"
	"net/http"
	"testing"
)

// BenchmarkProxyOverhead compares a GET through the proxy with the same GET straight to
// the app. It is a quick check; internal/bench measures the real thing.
func BenchmarkProxyOverhead(b *testing.B) {
	h := newHarness(b, Options{})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	run := func(b *testing.B, url string) {
		b.ReportAllocs()
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
}
