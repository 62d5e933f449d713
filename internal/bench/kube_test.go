package bench

import (
	"context"
	"testing"

	testkube "github.com/paddockhq/paddock/internal/testenv/kube"
)

// TestKubeTable takes one sample of each row of the Kubernetes table, on a test cluster of
// its own, or checks that it says why it did not run.
func TestKubeTable(t *testing.T) {
	e := newEnv(t)
	r, err := Run(context.Background(), e, Options{N: 1, Quick: true, Only: "kubernetes"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Tables) != 1 {
		t.Fatalf("%d tables, want the Kubernetes table", len(r.Tables))
	}
	rows := r.Tables[0].Rows
	if m := testkube.Missing(); m != "" {
		if len(rows) != 1 || rows[0].Missing == "" {
			t.Fatalf("no test cluster here (%s), and the table does not say so: %+v", m, rows)
		}
		return
	}
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 6", len(rows))
	}
	for _, row := range rows {
		if row.N != 1 || row.P50 <= 0 {
			t.Errorf("%s: %+v, want one positive sample", row.Name, row.Summary)
		}
	}
	if rows[0].Met == "" || rows[1].Met == "" || rows[4].Met == "" {
		t.Errorf("a gate row has no verdict: %+v", rows)
	}
}
