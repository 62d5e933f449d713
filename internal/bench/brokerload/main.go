// Command brokerload is the secrets broker's load generator, run inside a sandbox by
// `make bench`: C keep-alive clients ask the broker for a capability for D, and it prints
// how many answers came back and their latencies as JSON. It is built static and copied
// into the sandbox's workspace, so that the figures are what a process in a sandbox sees.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"
)

// Result is what brokerload prints.
type Result struct {
	Requests int     `json:"requests"`
	Errors   int     `json:"errors"`
	Seconds  float64 `json:"seconds"`
	P50us    float64 `json:"p50_us"`
	P99us    float64 `json:"p99_us"`
	FirstErr string  `json:"first_error,omitempty"`
}

func main() {
	url := flag.String("url", os.Getenv("PADDOCK_SERVICES_URL")+"/v1/capabilities/bench", "what to POST")
	c := flag.Int("c", 4, "concurrent clients")
	d := flag.Duration("d", 3*time.Second, "how long")
	flag.Parse()
	var mu sync.Mutex
	var lat []time.Duration
	var errs int
	var firstErr string
	start := time.Now()
	var wg sync.WaitGroup
	for range *c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			var mine []time.Duration
			for time.Since(start) < *d {
				t := time.Now()
				resp, err := hc.Post(*url, "", nil)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %s", resp.Status)
					}
				}
				if err != nil {
					mu.Lock()
					if errs++; firstErr == "" {
						firstErr = err.Error()
					}
					mu.Unlock()
					continue
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	r := Result{Requests: len(lat), Errors: errs, Seconds: time.Since(start).Seconds(), FirstErr: firstErr}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if n := len(lat); n > 0 {
		r.P50us = float64(lat[n/2].Microseconds())
		r.P99us = float64(lat[n*99/100].Microseconds())
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
}
