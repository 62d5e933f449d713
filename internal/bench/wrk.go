package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// wrk is Debian's wrk, table 5's second load generator: a process of its own, in C, so that
// the load does not take the CPU of the harness's process, which hosts the control plane.
type wrk struct {
	*peer
	bin string
}

func newWrk() *wrk {
	p, bin := lookPeer("wrk", "wrk")
	return &wrk{peer: p, bin: bin}
}

// round loads target (a URL) with c connections over two threads for d (whole seconds:
// wrk takes no less), each request with
// the Host header host (when not "") and cookie. Any error, non-2xx answer or socket error
// fails it.
func (w *wrk) round(ctx context.Context, target, host, cookie string, c int, d time.Duration) (loadStats, error) {
	u, err := url.Parse(target)
	if err != nil {
		return loadStats{}, err
	}
	args := []string{"-t", strconv.Itoa(min(2, c)), "-c", strconv.Itoa(c), "-d", fmt.Sprintf("%ds", max(1, int(d.Round(time.Second).Seconds()))), "--latency"}
	if host != "" {
		args = append(args, "-H", "Host: "+host)
	}
	if cookie != "" {
		args = append(args, "-H", "Cookie: "+cookie)
	}
	out, err := exec.CommandContext(ctx, w.bin, append(args, u.String())...).CombinedOutput()
	if err != nil {
		return loadStats{}, fmt.Errorf("wrk %s: %w: %s", target, err, strings.Join(strings.Fields(tail(string(out))), " "))
	}
	s, err := parseWrk(string(out))
	if err != nil {
		return s, fmt.Errorf("wrk %s: %w", target, err)
	}
	return s, nil
}

// parseWrk reads wrk --latency's report: Requests/sec, and the 50% and 99% lines of its
// latency distribution. Non-2xx answers and socket errors are errors.
func parseWrk(out string) (loadStats, error) {
	var s loadStats
	var haveRate, have50, have99 bool
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "Requests/sec:":
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return s, fmt.Errorf("requests/sec %q: %w", f[1], err)
			}
			s.rate, haveRate = v, true
		case len(f) == 2 && (f[0] == "50%" || f[0] == "99%"):
			v, err := wrkDuration(f[1])
			if err != nil {
				return s, err
			}
			if f[0] == "50%" {
				s.p50, have50 = v, true
			} else {
				s.p99, have99 = v, true
			}
		case len(f) > 0 && (strings.HasPrefix(sc.Text(), "  Non-2xx") || f[0] == "Socket"):
			return s, errors.New(strings.TrimSpace(sc.Text()))
		}
	}
	if !haveRate || !have50 || !have99 {
		return s, fmt.Errorf("no Requests/sec or latency distribution in its report: %s", strings.Join(strings.Fields(tail(out)), " "))
	}
	return s, nil
}

// wrkDuration is one of wrk's durations ("512.00us", "1.23ms", "2.00s") in ms.
func wrkDuration(v string) (float64, error) {
	for _, u := range []struct {
		suffix string
		ms     float64
	}{{"us", 1e-3}, {"ms", 1}, {"s", 1e3}, {"m", 60e3}} {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			x, err := strconv.ParseFloat(n, 64)
			if err != nil {
				return 0, fmt.Errorf("latency %q: %w", v, err)
			}
			return x * u.ms, nil
		}
	}
	return 0, fmt.Errorf("latency %q: no unit", v)
}
