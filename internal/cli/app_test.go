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
}
