package bench

import (
	"slices"
	"time"
)

// Summary describes a set of samples.
type Summary struct {
	N             int
	P50, P90, Min float64
}

// Summarize returns the median, 90th percentile and minimum of xs. Percentiles interpolate
// linearly between the closest ranks, so the median of an even count is the mean of the
// middle two.
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return Summary{N: len(s), P50: quantile(s, 0.5), P90: quantile(s, 0.9), Min: s[0]}
}

// quantileOf is the q quantile of xs, which need not be sorted.
func quantileOf(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return quantile(s, q)
}

// quantile of sorted s, 0 ≤ q ≤ 1.
func quantile(s []float64, q float64) float64 {
	pos := q * float64(len(s)-1)
	i := int(pos)
	if i+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[i] + (pos-float64(i))*(s[i+1]-s[i])
}

// ms is d in milliseconds, the unit of every latency sample.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// mbps is a rate in MB/s (10^6 bytes per second).
func mbps(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / 1e6 / d.Seconds()
}

// mib is bytes in MiB, the unit of every memory sample.
func mib(bytes int64) float64 { return float64(bytes) / (1 << 20) }
