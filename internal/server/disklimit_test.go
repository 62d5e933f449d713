package server_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
)

// TestDiskLimitReported: limits.disk is the sandbox's disk, for its workspace and /tmp
// together: a write past it fails inside with ENOSPC, and the exec's result names the limit
// and its value, as it does memory's; a file written through the API into the full disk is
// refused with a 4xx that says so, not a 500; once the sandbox deletes the file, writes
// work again and name no limit.
func TestDiskLimitReported(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "disk", Limits: api.Limits{Disk: "96M"}}), http.StatusCreated, &sb)
	if sb.Limits.DiskBytes != 96<<20 {
		t.Fatalf("limits %+v, want disk_bytes 96MiB", sb.Limits)
	}
	const msg = "the sandbox's disk limit (96MiB) was reached: its workspace and /tmp are full, and writes fail with ENOSPC"
	for _, path := range []string{"/workspace/big", "/tmp/big"} {
		res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"dd", "if=/dev/zero", "of=" + path, "bs=1M", "count=200"}})
		if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "No space left on device") || res.Limit != api.LimitDisk || res.Error != msg {
			t.Errorf("200MiB into %s under a 96MiB disk: exit %d, limit %q, error %q, stderr %q; want ENOSPC and limit disk, %q",
				path, res.ExitCode, res.Limit, res.Error, res.Stderr, msg)
		}
		if path == "/workspace/big" {
			resp := alice.DoToken("PUT", "/api/v1/sandboxes/"+sb.ID+"/files/content?path=more.bin", bytes.NewReader(make([]byte, 4<<20)))
			if resp.StatusCode < 400 || resp.StatusCode >= 500 {
				t.Errorf("a file written into the full disk through the API: %s, want a 4xx", resp.Status)
			}
			resp.Body.Close()
		}
		if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"rm", "-f", path}}); res.ExitCode != 0 {
			t.Fatalf("rm %s: %+v", path, res)
		}
	}
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"dd", "if=/dev/zero", "of=/workspace/small", "bs=1M", "count=8"}}); res.ExitCode != 0 || res.Limit != "" {
		t.Errorf("CONTROL FAILED: 8MiB once the disk has room: %+v", res)
	}
}
