package runner_test

import (
	"strings"
	"testing"
)

// TestFileSizeLimit: in every tier, Limits.FileSize is the RLIMIT_FSIZE of the sandbox's
// commands, soft and hard, from their first instruction (the shell reads it before it runs
// anything): a write past it is cut at the limit and SIGXFSZ (25) ends the writer, so dd
// reports 128+25 to its shell. The same write without the limit succeeds.
func TestFileSizeLimit(t *testing.T) {
	const script = `ulimit -S -f; ulimit -H -f; dd if=/dev/zero of=big bs=1M count=4 2>/dev/null; echo $?; wc -c <big`
	forEachTier(t, func(t *testing.T, h *harness) {
		spec := h.spec("sh", "-c", script)
		spec.Limits.FileSize = 1 << 20
		o := h.run(spec, "")
		// ulimit -f counts 512-byte blocks.
		if want := "2048\n2048\n153\n1048576\n"; o.stdout != want || o.res.ExitCode() != 0 {
			t.Errorf("under a 1MiB file size limit: stdout %q (exit %d, stderr %q), want %q", o.stdout, o.res.ExitCode(), o.stderr, want)
		}
		o = h.run(h.spec("sh", "-c", script), "")
		if want := "unlimited\nunlimited\n0\n4194304\n"; strings.TrimSpace(o.stdout) != strings.TrimSpace(want) {
			t.Errorf("CONTROL FAILED: without the limit: stdout %q (stderr %q), want %q", o.stdout, o.stderr, want)
		}
	})
}
