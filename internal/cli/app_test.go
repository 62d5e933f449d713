package cli

import (
	"bytes"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
)

func TestPrintApp(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	next := now.Add(1600 * time.Millisecond)
	var b bytes.Buffer
	printApp(&b, api.AppStatus{State: "backoff", Restarts: 4, Since: now.Add(-3 * time.Second), NextStart: &next,
		LastExit: &api.AppExit{ExitCode: 3}, LastOutput: "boom\nagain\n"}, now)
	want := "backoff for 3s, 4 restarts\nstarts again in 1.6s\nlast run: exit status 3\nlast output:\n  boom\n  again\n"
	if b.String() != want {
		t.Fatalf("printApp:\n%s\nwant:\n%s", b.String(), want)
	}

	b.Reset()
	printApp(&b, api.AppStatus{State: "running", Restarts: 5, Since: now.Add(-2 * time.Second),
		LastExit: &api.AppExit{ExitCode: 3}, LastOutput: "boom\n", LastOutputTruncated: true, Output: "listening\n"}, now)
	want = "running for 2s, 5 restarts\nlast run: exit status 3\nlast output (its start cut):\n  boom\noutput:\n  listening\n"
	if b.String() != want {
		t.Fatalf("printApp running:\n%s\nwant:\n%s", b.String(), want)
	}
}
