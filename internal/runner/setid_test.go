package runner_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/wire"
)

// setIDAttempts are the ways a command might leave a setuid or setgid file in its
// workspace; each prints its name and its exit status.
const setIDAttempts = `cp /usr/bin/id id
for m in u+s g+s 4755 2755 6755; do chmod $m id 2>/dev/null; echo "chmod $m=$?"; done
install -m 4755 /usr/bin/id inst 2>/dev/null; echo "install=$?"
python3 -c 'import os; os.close(os.open("created", os.O_CREAT|os.O_WRONLY, 0o4755))' 2>/dev/null; echo "open=$?"
python3 -c 'import os; os.mknod("node", 0o104755)' 2>/dev/null; echo "mknod=$?"
python3 -c 'import os; fd=os.open(".", os.O_TMPFILE|os.O_WRONLY, 0o2755); os.link("/proc/self/fd/%d" % fd, "tmpfile")' 2>/dev/null; echo "tmpfile=$?"
chmod 0750 id; echo "plain=$?"`

// TestNoSetIDFiles: in a container, no way of making a file setuid or setgid works, in a
// workspace of the user's own (--workspace, a directory a host user owns and reaches) or
// paddock's: the host never gets a set-id file from a sandbox, which any host user who
// reached it would run as its owner. A plain chmod still works.
func TestNoSetIDFiles(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		if h.onCluster {
			t.Skip("it gives the sandbox a host directory as its workspace, which a cluster sandbox cannot have (its workspace is its volume)")
		}
		switch {
		case !h.inCtr:
			t.Skip("not covered: the process tier is a host process as the sandbox user, whose files' modes are its own (--insecure)")
		case h.tier == wire.TierMicroVM:
			t.Skip("not covered: with --workspace a guest's chmod reaches the host user's file through QEMU; docs/security.md")
		}
		ws := filepath.Join(shortDir(t), "proj")
		if err := os.Mkdir(ws, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(ws, 1000, 1000); err != nil {
			t.Fatal(err)
		}
		spec := h.spec("sh", "-c", setIDAttempts)
		spec.Workspace = ws
		o := h.run(spec, "")
		for _, line := range strings.Split(strings.TrimSpace(o.stdout), "\n") {
			name, status, _ := strings.Cut(line, "=")
			if (name == "plain") != (status == "0") {
				t.Errorf("%s: exit %s", name, status)
			}
		}
		if !strings.Contains(o.stdout, "plain=0") {
			t.Fatalf("CONTROL FAILED: %q (stderr %q)", o.stdout, o.stderr)
		}
		filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
			if fi, err := os.Lstat(p); err == nil && fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
				t.Errorf("set-id file on the host: %s %v", p, fi.Mode())
			}
			return nil
		})
	})
}

// shortDir is a temporary directory every user may traverse.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pdk")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
