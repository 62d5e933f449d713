package server_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
)

// limitsPolicy sets every limit a command can meet, small enough to meet at once.
const limitsPolicy = "resources: {memory: 96MiB, pids: 16, timeout: 2s, tmp: 8MiB, file_size: 1MiB}\n"

// TestResourceLimits: a policy's resources, attached and then applied by a restart, are the
// sandbox's limits, and an exec (and the exec stream) that meets one says which, with its
// value: the file size limit ends a large write with SIGXFSZ, /tmp fills up at its size
// (ENOSPC), a memory bomb is OOM-killed, a fork loop is refused forks, a sleep outlives
// the timeout. The same large write before the restart succeeds: it is the policy that
// limits it.
func TestResourceLimits(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "limits", Limits: api.Limits{Memory: "256M"}}), http.StatusCreated, &sb)
	base := "/api/v1/sandboxes/" + sb.ID
	bigWrite := api.ExecRequest{Argv: []string{"dd", "if=/dev/zero", "of=/workspace/big", "bs=1M", "count=4"}}
	size := func(path string) int64 {
		t.Helper()
		res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"stat", "-c", "%s", path}})
		n, err := strconv.ParseInt(strings.TrimSpace(string(res.Stdout)), 10, 64)
		if err != nil {
			t.Fatalf("stat %s: %q %q", path, res.Stdout, res.Stderr)
		}
		return n
	}

	// Control: before the policy applies, the same write succeeds and meets no limit.
	if res := execIn(t, alice, sb.ID, bigWrite); res.ExitCode != 0 || res.Limit != "" || size("/workspace/big") != 4<<20 {
		t.Fatalf("CONTROL FAILED: a 4MiB write before the policy: %+v", res)
	}

	var pol api.SandboxPolicy
	servertest.Decode(t, putPolicy(t, alice, sb.ID, "application/yaml", limitsPolicy), http.StatusOK, &pol)
	if l := pol.Limits; l.MemoryBytes != 96<<20 || l.Pids != 16 || l.TmpBytes != 8<<20 || l.FileSizeBytes != 1<<20 {
		t.Fatalf("limits after attaching the policy: %+v", l)
	}
	if !strings.Contains(pol.Summary, "tmp 8MiB, file_size 1MiB") {
		t.Errorf("summary %q does not show tmp and file_size", pol.Summary)
	}
	var after api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", base+"/restart", nil), http.StatusOK, &after)
	if after.State != api.StateRunning || after.Limits.TmpBytes != 8<<20 || after.Limits.FileSizeBytes != 1<<20 {
		t.Fatalf("restarted: %s (%s), limits %+v", after.State, after.Error, after.Limits)
	}

	t.Run("file_size", func(t *testing.T) {
		res := execIn(t, alice, sb.ID, bigWrite)
		const msg = "the sandbox's file size limit (1MiB) was hit: the command was ended by SIGXFSZ"
		if res.Signal != int(syscall.SIGXFSZ) || res.Limit != api.LimitFileSize || res.Error != msg {
			t.Errorf("a 4MiB write under file_size 1MiB: signal %d, limit %q, error %q; want SIGXFSZ, %q, %q",
				res.Signal, res.Limit, res.Error, api.LimitFileSize, msg)
		}
		if n := size("/workspace/big"); n > 1<<20 {
			t.Errorf("the file is %d bytes, over the 1MiB limit", n)
		}
		// A write within the limit is not one.
		if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"dd", "if=/dev/zero", "of=/workspace/small", "bs=1M", "count=1"}}); res.ExitCode != 0 || res.Limit != "" || res.Error != "" {
			t.Errorf("a 1MiB write under file_size 1MiB: %+v", res)
		}
		// The exec stream's exit says the same.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		exit := streamExit(ctx, t, paddock.New(e.URL, paddock.WithToken(alice.Token)), sb.ID, api.StreamStart{Argv: bigWrite.Argv})
		if exit.Signal != int(syscall.SIGXFSZ) || exit.Limit != api.LimitFileSize || exit.Error != msg {
			t.Errorf("the stream of a 4MiB write: %+v", exit)
		}
	})

	t.Run("tmp", func(t *testing.T) {
		// 16 files of 1MiB (each within the file size limit) into an 8MiB /tmp.
		fill := `i=0; while [ $i -lt 16 ]; do dd if=/dev/zero of=/tmp/f$i bs=1M count=1 2>/dev/null || { dd if=/dev/zero of=/tmp/g bs=1M count=1; exit 1; }; i=$((i+1)); done`
		res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", fill}})
		if res.ExitCode != 1 || !strings.Contains(string(res.Stderr), "No space left on device") {
			t.Errorf("16MiB into an 8MiB /tmp: exit %d, stderr %q; want ENOSPC", res.ExitCode, res.Stderr)
		}
		du := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "du -sk /tmp; rm -f /tmp/f* /tmp/g"}})
		if kb, _ := strconv.Atoi(strings.Fields(string(du.Stdout) + " x")[0]); kb < 7<<10 || kb > 8<<10 {
			t.Errorf("/tmp held %q before it was emptied; want about 8MiB", du.Stdout)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		began := time.Now()
		res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sleep", "30"}})
		if msg := "the policy's timeout (2s) was hit: the command was killed"; !res.TimedOut || res.Limit != api.LimitTimeout || res.Error != msg {
			t.Errorf("sleep 30 under timeout 2s: %+v; want limit timeout, %q", res, msg)
		}
		if took := time.Since(began); took > 15*time.Second {
			t.Errorf("the 2s timeout took %s", took)
		}
		res = execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sleep", "30"}, TimeoutMS: 300})
		if msg := "the exec's timeout (300ms) was hit: the command was killed"; res.Limit != api.LimitTimeout || res.Error != msg {
			t.Errorf("sleep 30 with timeout_ms 300: %+v; want %q", res, msg)
		}
	})

	t.Run("memory", func(t *testing.T) {
		res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=200M", "count=1"}})
		const msg = "the sandbox's memory limit (96MiB) was hit: a process was killed"
		if res.Signal != int(syscall.SIGKILL) || res.Limit != api.LimitMemory || res.Error != msg {
			t.Errorf("a 200MiB buffer under memory 96MiB: signal %d, limit %q, error %q; want SIGKILL, memory, %q", res.Signal, res.Limit, res.Error, msg)
		}
	})

	t.Run("pids", func(t *testing.T) {
		loop := `i=0; while [ $i -lt 64 ]; do sleep 1 & i=$((i+1)); done; wait`
		res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", loop}})
		if res.Limit != api.LimitPids || !strings.HasPrefix(res.Error, "the sandbox's process limit (16) was hit: ") || !strings.Contains(res.Error, "refused") {
			t.Errorf("64 processes under pids 16: limit %q, error %q (exit %d, stderr %q); want pids", res.Limit, res.Error, res.ExitCode, res.Stderr)
		}
	})

	t.Run("none", func(t *testing.T) {
		time.Sleep(1100 * time.Millisecond) // the fork loop's sleeps end
		if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo ok"}}); res.Limit != "" || res.Error != "" || string(res.Stdout) != "ok\n" {
			t.Errorf("a command that meets no limit: %+v", res)
		}
	})
}
