package server_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
)

// An exec at the schema's largest max_output_bytes, filling both stdout and stderr to
// it, gets its whole result rather than a gRPC "message larger than max"; one past it is
// refused up front.
func TestExecOutputAtItsMaximum(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "big", Limits: api.Limits{Memory: "512M"}}), http.StatusCreated, &sb)
	const max = 16 << 20
	script := "head -c 17000000 /dev/zero | tr '\\0' a; head -c 17000000 /dev/zero | tr '\\0' b >&2"
	res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", script}, MaxOutputBytes: max})
	if res.ExitCode != 0 || len(res.Stdout) != max || len(res.Stderr) != max || !res.StdoutTruncated || !res.StderrTruncated {
		t.Fatalf("exit %d, stdout %d bytes (truncated %v), stderr %d bytes (truncated %v); want both %d and truncated",
			res.ExitCode, len(res.Stdout), res.StdoutTruncated, len(res.Stderr), res.StderrTruncated, max)
	}
	if !bytes.Equal(res.Stdout[:4], []byte("aaaa")) || !bytes.Equal(res.Stderr[:4], []byte("bbbb")) {
		t.Errorf("output %q… %q…", res.Stdout[:4], res.Stderr[:4])
	}
	resp := alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/exec", api.ExecRequest{Argv: []string{"true"}, MaxOutputBytes: max + 1})
	servertest.ErrorOf(t, resp, http.StatusBadRequest)
}
