// Command fetch is the egress benchmark's client, run inside a sandbox by `make bench`: it
// downloads one URL and prints as JSON how many body bytes arrived and how long they took.
// Without -connect it goes through the proxy the environment names (HTTPS_PROXY,
// HTTP_PROXY), as any program in a sandbox with a network policy does; with it, straight
// to that address. It is built static and copied into the sandbox's workspace, so that
// the figures are what a process in a sandbox sees.
package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"syscall"
	"time"
)

// Result is what fetch prints.
type Result struct {
	// Bytes is the length of the body that arrived, and Seconds the time from just before
	// the request (connection, TLS handshake and CONNECT included) to its end.
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	// SHA256 is the body's hash, with -sum.
	SHA256 string `json:"sha256,omitempty"`
	// Proxy is the proxy the request went through, "" for none.
	Proxy string `json:"proxy,omitempty"`
	// CPUSeconds is the user and system time fetch used, start to end.
	CPUSeconds float64 `json:"cpu_seconds"`
}

func main() {
	url := flag.String("url", "", "what to GET")
	connect := flag.String("connect", "", "dial this host:port whatever the URL names, with no proxy (as curl --resolve); empty: through the environment's proxy, which must be set")
	ca := flag.String("ca", "", "PEM file of the roots HTTPS trusts (default: the system's)")
	sum := flag.Bool("sum", false, "hash the body (SHA-256) as it arrives; this costs CPU, so the time is not the download's alone")
	proxy := flag.String("proxy", "", "go through this proxy (http://host:port) instead of the environment's, even to a loopback address (a peer proxy of the bench)")
	flag.Parse()
	r, err := fetch(*url, *connect, *proxy, *ca, *sum)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fetch:", err)
		os.Exit(1)
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
}

func fetch(url, connect, proxy, caFile string, sum bool) (Result, error) {
	tr := &http.Transport{DisableCompression: true, TLSClientConfig: &tls.Config{}}
	defer tr.CloseIdleConnections()
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return Result{}, err
		}
		tr.TLSClientConfig.RootCAs = x509.NewCertPool()
		if !tr.TLSClientConfig.RootCAs.AppendCertsFromPEM(pem) {
			return Result{}, fmt.Errorf("%s holds no certificate", caFile)
		}
	}
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return Result{}, err
	}
	var r Result
	switch {
	case proxy != "":
		p, err := neturl.Parse(proxy)
		if err != nil || p.Scheme != "http" || p.Host == "" {
			return Result{}, fmt.Errorf("-proxy %q: want http://host:port", proxy)
		}
		tr.Proxy, r.Proxy = http.ProxyURL(p), p.String()
	case connect != "":
		tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, connect)
		}
	default:
		// A download that bypassed the proxy would be timed as a proxied one: refuse.
		p, err := http.ProxyFromEnvironment(req)
		if err != nil || p == nil {
			return Result{}, errors.New("no proxy for " + url + " in the environment (HTTPS_PROXY, HTTP_PROXY)")
		}
		tr.Proxy, r.Proxy = http.ProxyURL(p), p.String()
	}
	var h hash.Hash
	// A plain Writer: io.Discard's ReadFrom would read with its own small buffer.
	w := struct{ io.Writer }{io.Discard}
	if sum {
		h = sha256.New()
		w.Writer = h
	}
	start := time.Now()
	res, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return Result{}, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return Result{}, fmt.Errorf("GET %s: %s", url, res.Status)
	}
	r.Bytes, err = io.CopyBuffer(w, res.Body, make([]byte, 256<<10))
	r.Seconds = time.Since(start).Seconds()
	if err != nil {
		return Result{}, fmt.Errorf("GET %s: after %d bytes: %w", url, r.Bytes, err)
	}
	if res.ContentLength >= 0 && r.Bytes != res.ContentLength {
		return Result{}, fmt.Errorf("GET %s: %d bytes of %d", url, r.Bytes, res.ContentLength)
	}
	if h != nil {
		r.SHA256 = hex.EncodeToString(h.Sum(nil))
	}
	r.CPUSeconds = cpuTime().Seconds()
	return r, nil
}

// cpuTime is the user and system time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
