package session

import (
	"slices"
	"testing"
)

func TestMergeEnv(t *testing.T) {
	got := mergeEnv([]string{"PATH=/bin", "HOME=/home/s", "A=1"}, []string{"A=2", "B=3"})
	want := []string{"PATH=/bin", "HOME=/home/s", "A=2", "B=3"}
	if !slices.Equal(got, want) {
		t.Errorf("mergeEnv = %v, want %v", got, want)
	}
}
