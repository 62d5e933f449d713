package coder_test

import (
	"testing"
	"time"
)

// BenchmarkTurnOverhead runs turns of two model answers (a tool call, then the answer)
// against a scripted provider that takes 100 ms for each, through the real gateway, and
// reports a turn's time over the provider's (the bound is 1.2).
func BenchmarkTurnOverhead(b *testing.B) {
	for _, api := range apis {
		b.Run(api, func(b *testing.B) {
			var total time.Duration
			for range b.N {
				b.StopTimer()
				s := newSession(b, api, "slow_turn.json", map[string]string{"a.txt": "x\n"}, nil)
				b.StartTimer()
				start := time.Now()
				if _, err := s.run("go", nil); err != nil {
					b.Fatal(err)
				}
				total += time.Since(start)
			}
			provider := 200 * time.Millisecond
			b.ReportMetric(float64(total)/float64(b.N)/float64(provider), "turn/provider")
		})
	}
}
