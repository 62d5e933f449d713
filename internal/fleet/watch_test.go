package fleet

import (
	"testing"
	"time"
)

// A sandbox whose agent keeps dying soon after it starts waits longer before each
// recovery, up to restartMax; one whose agent ran a while starts from restartFirst.
func TestFirstDelay(t *testing.T) {
	for _, tc := range []struct {
		last, lived, want time.Duration
	}{
		{0, time.Second, restartFirst},
		{restartFirst, time.Second, 2 * restartFirst},
		{16 * time.Second, 5 * time.Second, restartMax},
		{restartMax, time.Second, restartMax},
		{restartMax, stableAfter, restartFirst},
	} {
		if got := firstDelay(tc.last, tc.lived); got != tc.want {
			t.Errorf("firstDelay(%s, %s) = %s, want %s", tc.last, tc.lived, got, tc.want)
		}
	}
}
