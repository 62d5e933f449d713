package egress

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// BenchmarkDownload downloads 64MiB from a loopback server straight and through the
// proxy (on its Unix socket, as a sandbox reaches it), alternating the two in every
// iteration so that both see the same machine: over plain HTTP (a forward request) and
// over HTTPS (a CONNECT tunnel). It reports each one's MB/s and their ratio, proxy ÷
// direct; the target is ≥ 0.8.
func BenchmarkDownload(b *testing.B) {
	h := newHarness(b, nil)
	const size = 64 << 20
	direct := &http.Transport{
		// Every name is the upstream, as the fake resolver says for the proxy.
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, _ := net.SplitHostPort(addr)
			return (&net.Dialer{}).DialContext(ctx, network, net.JoinHostPort(upstreamAddr, port))
		},
		TLSClientConfig: &tls.Config{RootCAs: h.pool},
	}
	b.Cleanup(direct.CloseIdleConnections)
	directClient, proxied := &http.Client{Transport: direct}, h.client(nil)
	for _, c := range []struct {
		name string
		url  string
	}{
		{"http", fmt.Sprintf("http://allowed.test:%d/big?n=%d", h.pport, size)},
		{"https", fmt.Sprintf("https://allowed.test:%d/big?n=%d", h.sport, size)},
	} {
		b.Run(c.name, func(b *testing.B) {
			buf := make([]byte, 64<<10)
			var took [2]time.Duration
			i := 0
			for b.Loop() {
				for k := range 2 {
					which := (i + k) % 2 // alternate which goes first
					client := directClient
					if which == 1 {
						client = proxied
					}
					took[which] += download(b, client, c.url, size, buf)
				}
				i++
			}
			mbps := func(d time.Duration) float64 { return float64(size) * float64(i) / d.Seconds() / 1e6 }
			b.ReportMetric(mbps(took[0]), "direct-MB/s")
			b.ReportMetric(mbps(took[1]), "proxy-MB/s")
			b.ReportMetric(took[0].Seconds()/took[1].Seconds(), "proxy/direct")
		})
	}
}

func download(b *testing.B, c *http.Client, url string, size int64, buf []byte) time.Duration {
	start := time.Now()
	res, err := c.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	// Copy through a plain Writer, so both read with the same buffer.
	n, err := io.CopyBuffer(struct{ io.Writer }{io.Discard}, res.Body, buf)
	res.Body.Close()
	if err != nil || n != size {
		b.Fatalf("read %d bytes, %v", n, err)
	}
	return time.Since(start)
}
