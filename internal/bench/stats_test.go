package bench

import "testing"

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		name string
		xs   []float64
		want Summary
	}{
		{"empty", nil, Summary{}},
		{"one", []float64{7}, Summary{N: 1, P50: 7, P90: 7, Min: 7}},
		{"even count takes the mean of the middle two", []float64{4, 1, 3, 2}, Summary{N: 4, P50: 2.5, P90: 3.7, Min: 1}},
		{"odd count, unsorted", []float64{10, 1, 5, 3, 2, 9, 4, 8, 7, 6, 0}, Summary{N: 11, P50: 5, P90: 9, Min: 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Summarize(tc.xs)
			const eps = 1e-9
			if got.N != tc.want.N || abs(got.P50-tc.want.P50) > eps || abs(got.P90-tc.want.P90) > eps || got.Min != tc.want.Min {
				t.Errorf("Summarize(%v) = %+v, want %+v", tc.xs, got, tc.want)
			}
		})
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

func TestInterleaveRotatesAndSkipsWarmup(t *testing.T) {
	rec := newRecorder()
	var order string
	step := func(name string) func() error {
		return func() error {
			order += name
			rec.add(name, 1)
			return nil
		}
	}
	if err := interleave(rec, 1, 3, step("A"), step("B")); err != nil {
		t.Fatal(err)
	}
	if order != "ABBAABBA" {
		t.Errorf("order %q, want ABBAABBA (warm-up AB, then BA AB BA)", order)
	}
	if n := len(rec.series["A"]); n != 3 {
		t.Errorf("%d samples of A recorded, want 3 (the warm-up round dropped)", n)
	}
}
