package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/gateway"
)

// gatewayFixture is a fake OpenAI-compatible provider and the provider gateway in front
// of it, both serving on loopback from the harness's process.
type gatewayFixture struct {
	key               string
	providerURL       string // …/v1/chat/completions, straight to the provider
	gatewayURL        string // the same through /gateway/openai
	relayURL          string // the same through a bare httputil.ReverseProxy
	client            *http.Client
	provider, front   *http.Server
	relay             *http.Server
	providerL, frontL net.Listener
}

// startGatewayFixture starts the provider and the gateway as `paddock serve` mounts it
// (http.StripPrefix("/gateway", …), the caller set by the channel's handler).
func startGatewayFixture() (*gatewayFixture, error) {
	b := make([]byte, 16)
	rand.Read(b)
	f := &gatewayFixture{key: "sk-bench-" + hex.EncodeToString(b)}
	var err error
	if f.providerL, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return nil, err
	}
	f.provider = &http.Server{Handler: http.HandlerFunc(f.serveCompletion)}
	go f.provider.Serve(f.providerL)
	base := "http://" + f.providerL.Addr().String()
	gw, err := gateway.New(gateway.Config{Providers: []gateway.Provider{
		{Name: "openai", Kind: gateway.KindOpenAI, BaseURL: base, APIKey: gateway.Secret(f.key)},
	}}, gateway.Options{Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Close()
		return nil, err
	}
	if f.frontL, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		f.Close()
		return nil, err
	}
	inner := http.StripPrefix("/gateway", gw)
	caller := gateway.Caller{UserID: "bench", SandboxID: "sb-bench"}
	f.front = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner.ServeHTTP(w, r.WithContext(gateway.WithCaller(r.Context(), caller)))
	})}
	go f.front.Serve(f.frontL)
	if err := f.startRelay(base); err != nil {
		f.Close()
		return nil, err
	}
	f.providerURL = base + "/v1/chat/completions"
	f.gatewayURL = "http://" + f.frontL.Addr().String() + "/gateway/openai/v1/chat/completions"
	f.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	return f, nil
}

// startRelay serves Go's bare httputil.ReverseProxy in front of the provider, swapping
// the sandbox's key for the platform's and flushing every write: the floor of a relay in
// Go, with none of the gateway's request rewrite or metering.
func (f *gatewayFixture) startRelay(base string) error {
	target, err := url.Parse(base)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	rp := &httputil.ReverseProxy{FlushInterval: -1, Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Header.Set("Authorization", "Bearer "+f.key)
	}}
	f.relay = &http.Server{Handler: rp}
	go f.relay.Serve(l)
	f.relayURL = "http://" + l.Addr().String() + "/v1/chat/completions"
	return nil
}

func (f *gatewayFixture) Close() {
	for _, s := range []*http.Server{f.front, f.relay, f.provider} {
		if s != nil {
			s.Close()
		}
	}
	if f.client != nil {
		f.client.CloseIdleConnections()
	}
}

// serveCompletion streams a chat completion as OpenAI does: a chunk per token as
// server-sent events, the usage last when asked, then [DONE]. The first chunk goes at
// once: what is timed is the path, not a model.
func (f *gatewayFixture) serveCompletion(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.Header.Get("Authorization") != "Bearer "+f.key {
		http.Error(w, `{"error":{"message":"bad key","type":"invalid_request_error"}}`, http.StatusUnauthorized)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	for i := range 8 {
		fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-b\",\"object\":\"chat.completion.chunk\",\"model\":\"bench\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d\"},\"finish_reason\":null}]}\n\n", i)
		fl.Flush()
	}
	if strings.Contains(string(body), `"include_usage":true`) {
		_, _ = io.WriteString(w, "data: {\"id\":\"chatcmpl-b\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":8,\"total_tokens\":17}}\n\n")
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}

// completion posts a streamed completion to url and returns the time to its first body
// byte and to its end.
func (f *gatewayFixture) completion(ctx context.Context, url, auth string) (first, whole time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url,
		strings.NewReader(`{"model":"bench","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", auth)
	start := time.Now()
	res, err := f.client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("POST %s: %s", url, res.Status)
	}
	var one [1]byte
	if _, err := io.ReadFull(res.Body, one[:]); err != nil {
		return 0, 0, err
	}
	first = time.Since(start)
	rest, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, 0, err
	}
	if !strings.Contains(string(rest), "[DONE]") {
		return 0, 0, errors.New("the stream ended without [DONE]")
	}
	return first, time.Since(start), nil
}

// GatewayTTFBTable compares the time to first byte of a streamed chat completion through
// the provider gateway with the same request sent straight to the provider, n samples of
// each, interleaved, after two warm-up rounds.
func GatewayTTFBTable(ctx context.Context, n int) (*Table, error) {
	f, err := startGatewayFixture()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rec := newRecorder()
	variant := func(name, url, auth string) func() error {
		return func() error {
			first, whole, err := f.completion(ctx, url, auth)
			rec.add(name+".first", ms(first))
			rec.add(name+".whole", ms(whole))
			return err
		}
	}
	err = interleave(rec, 2, n,
		variant("direct", f.providerURL, "Bearer "+f.key),
		variant("gateway", f.gatewayURL, "Bearer sandbox-placeholder"),
		variant("relay", f.relayURL, "Bearer sandbox-placeholder"),
	)
	if err != nil {
		return nil, err
	}
	gf, df := rec.summary("gateway.first"), rec.summary("direct.first")
	gw, dw := rec.summary("gateway.whole"), rec.summary("direct.whole")
	rf, rw := rec.summary("relay.first"), rec.summary("relay.whole")
	added := paired(rec, "gateway.first", "direct.first")
	t := &Table{
		Title: "9. Streamed completion through the provider gateway against the provider reached directly",
		About: fmt.Sprintf("`POST /v1/chat/completions` with `\"stream\": true` to a fake OpenAI-compatible provider on a loopback port, "+
			"which streams 8 chunks as server-sent events at once, then the usage and `[DONE]`. *Through the gateway*: the same request "+
			"to the provider gateway (internal/gateway, mounted under /gateway as `paddock serve` does, on its own loopback port, in the "+
			"harness's process), which replaces the sandbox's key with the platform's, sets `stream_options.include_usage`, forwards, and "+
			"relays the stream chunk by chunk while it meters usage. *Direct*: the request with the platform key straight to the provider. "+
			"One Go HTTP client with keep-alive sends both. The *first byte* is from just before the request to the first byte of the "+
			"streamed body; the *whole stream* to its end. %d samples of each, interleaved, after two warm-up rounds; the *added* row is "+
			"the per-sample difference gateway − direct. The *floor* is Go's bare `httputil.ReverseProxy` on its own loopback port in front of "+
			"the same provider, swapping the key and flushing every write, with none of the gateway's request rewrite or metering: what any "+
			"relay written in Go pays. The target is a ratio to that floor; the ratio column gives each row against direct.", n),
		Rows: []Row{
			{Name: "through the gateway: first byte", Unit: "ms", Summary: gf, Ratio: ratio(gf.P50, df.P50) + "; " + ratio(gf.P50, rf.P50) + " the floor",
				Target: gatewayTarget.String(), Met: gatewayTarget.met(gf.P50, rf.P50, "")},
			{Name: "*floor:* through `httputil.ReverseProxy`: first byte", Unit: "ms", Summary: rf, Ratio: ratio(rf.P50, df.P50)},
			{Name: "direct: first byte", Unit: "ms", Summary: df, Ratio: "1.00× (baseline)"},
			{Name: "*added* first byte, gateway − direct", Unit: "ms", Summary: added},
			{Name: "through the gateway: whole stream", Unit: "ms", Summary: gw, Ratio: ratio(gw.P50, dw.P50) + "; " + ratio(gw.P50, rw.P50) + " the floor"},
			{Name: "*floor:* through `httputil.ReverseProxy`: whole stream", Unit: "ms", Summary: rw, Ratio: ratio(rw.P50, dw.P50)},
			{Name: "direct: whole stream", Unit: "ms", Summary: dw, Ratio: "1.00× (baseline)"},
		},
	}
	t.Notes = []string{
		fmt.Sprintf("The gateway adds %.3f ms to the time to first byte at the median (%.3f ms against %.3f ms direct, and %.3f ms through the bare "+
			"`httputil.ReverseProxy`; target %s: %s): one more HTTP exchange on loopback, reading and re-encoding the request body, and the header rewrite. "+
			"Against a real provider, whose first token takes hundreds of milliseconds, that is the whole of its cost; "+
			"the relay flushes every chunk as it arrives, so later tokens are not delayed further. The absolute figures are information: "+
			"they follow the machine's load, and the ratio to the floor of the same run does not.",
			added.P50, gf.P50, df.P50, rf.P50, gatewayTarget, gatewayTarget.word(gf.P50, rf.P50, "")),
	}
	return t, nil
}

// gatewayTarget is table 9's: the gateway's first byte against the bare relay's.
var gatewayTarget = atMost(1.5, "the floor")
