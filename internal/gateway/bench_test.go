package gateway

import (
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkGatewayTTFB times a streamed completion's first byte through the gateway
// against the same request sent straight to the fake provider, on loopback. The
// difference is what the gateway adds to time to first token (target: ≤ 1 ms); ttfb-µs
// is the median, ns/op the whole exchange.
func BenchmarkGatewayTTFB(b *testing.B) {
	h := newHarness(b, func(_ *Config, o *Options) {
		o.Log = slog.New(slog.DiscardHandler)
		o.Usage = nil
	})
	h.openai.gap = 0
	body := completionBody(KindOpenAI, true)
	for _, v := range []struct {
		name string
		url  string
		hdr  http.Header
	}{
		{"direct", h.openai.srv.URL + "/v1/chat/completions", http.Header{"Authorization": {"Bearer " + h.openai.key}}},
		{"gateway", h.base(alice) + "/openai/v1/chat/completions", http.Header{"Authorization": {"Bearer sandbox-dummy"}}},
	} {
		b.Run(v.name, func(b *testing.B) {
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			defer client.CloseIdleConnections()
			var ttfb []time.Duration
			for b.Loop() {
				d, err := firstByte(client, v.url, body, v.hdr)
				if err != nil {
					b.Fatal(err)
				}
				ttfb = append(ttfb, d)
			}
			slices.Sort(ttfb)
			b.ReportMetric(float64(ttfb[len(ttfb)/2].Nanoseconds())/1e3, "ttfb-µs")
		})
	}
}

// firstByte posts a streamed completion and returns how long its first body byte took;
// it reads the rest before returning, so the connection is reused.
func firstByte(c *http.Client, url, body string, hdr http.Header) (time.Duration, error) {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header = hdr.Clone()
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	res, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	var one [1]byte
	if _, err := io.ReadFull(res.Body, one[:]); err != nil {
		return 0, err
	}
	d := time.Since(start)
	_, err = io.Copy(io.Discard, res.Body)
	return d, err
}

// BenchmarkUsageSSE is the usage parser's throughput on an OpenAI stream.
func BenchmarkUsageSSE(b *testing.B) {
	chunk := []byte("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-test\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"token\"},\"finish_reason\":null}],\"usage\":null}\n\n")
	b.SetBytes(int64(len(chunk)))
	var p sseParser
	for b.Loop() {
		p.Write(chunk)
	}
}

// BenchmarkUsageJSON is the usage scanner's throughput on a large JSON answer.
func BenchmarkUsageJSON(b *testing.B) {
	doc := []byte(`{"data":[` + strings.Repeat(`{"embedding":[0.0123456789,0.5,-0.25],"text":"some \"quoted\" text"},`, 1000) + `{}],"usage":{"prompt_tokens":5}}`)
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		var s usageScanner
		s.Write(doc)
	}
}
