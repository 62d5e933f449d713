//go:build microvm

package containment

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/wire"
)

// TestMicroVM runs the suite's probes that mean something in a guest from inside a microvm
// sandbox (QEMU, TCG here; `make test` runs it with -tags microvm, apart from the other
// packages, as the runner's microVM suite is). The guest's kernel is the boundary there:
// the probes show that it is another kernel, that the host's files, processes and network
// are not reachable from it, and that the sandbox user holds no privilege in it. What the
// guest's own limits do to bombs is the runner's conformance suite's (TestLimits/microvm).
func TestMicroVM(t *testing.T) {
	h := newHarness(t)
	_, hostArgv := hostProcess(t)
	rootCanary := filepath.Join("/root", ".paddock-canary-"+randHex(6))
	hostCanary(t, rootCanary)
	dataCanary := filepath.Join(h.cfg.DataDir, "canary-"+randHex(6))
	hostCanary(t, dataCanary)
	lo := listen(t, "tcp", "127.0.0.1:0")
	abstractName := "@paddock-containment-" + randHex(8)
	abstract := listen(t, "unix", abstractName)
	b := h.newBox(t, boxOpts{tier: wire.TierMicroVM})
	loAddr := "127.0.0.1:" + lo.port()

	runChecks(t, b, []check{
		// Another kernel: the guest's, not the host's.
		{p: probe{Name: "the kernel", Op: "read", Args: []string{"/proc/version"}}, want: func(t *testing.T, r result) {
			if !r.OK || !strings.Contains(r.Out, "Debian") {
				t.Fatalf("CONTROL FAILED: want the guest's Debian kernel: %s", r)
			}
		}, host: same(probe{Op: "read", Args: []string{"/proc/version"}}), hostWant: func(t *testing.T, r result) {
			if !r.OK {
				t.Fatalf("CONTROL FAILED: %s", r)
			}
		}},

		// The host's files.
		{p: probe{Name: "read the host's /root canary", Op: "read", Args: []string{rootCanary}}, want: denied("ENOENT", "EACCES"), host: same(probe{Op: "read", Args: []string{rootCanary}})},
		{p: probe{Name: "read the data dir canary", Op: "read", Args: []string{dataCanary}}, want: denied("ENOENT", "EACCES"), host: same(probe{Op: "read", Args: []string{dataCanary}})},
		{p: probe{Name: "read /etc/shadow", Op: "read", Args: []string{"/etc/shadow"}}, want: denied("ENOENT", "EACCES"), host: same(probe{Op: "read", Args: []string{"/etc/shadow"}})},
		{p: probe{Name: "create a file in the host's /usr", Op: "create", Args: []string{"/usr/paddock-probe"}}, want: denied("EROFS", "EACCES")},
		{p: probe{Name: "create /workspace/paddock-probe (control)", Op: "create", Args: []string{"/workspace/paddock-probe"}}, want: allowed},

		// The host's processes.
		{p: probe{Name: "find the host process by its command line", Op: "scan-proc", Args: []string{mask(hostArgv)}}, want: denied(), host: same(probe{Op: "scan-proc", Args: []string{mask(hostArgv)}})},

		// Privileges: none held, none to be gained by exec. The guest has no seccomp filter
		// and its bounding set is whole: its kernel is the boundary, and no_new_privs with
		// nosuid mounts leaves nothing to raise the sandbox user to the guest's root.
		{p: probe{Name: "/proc/self/status", Op: "read", Args: []string{"/proc/self/status"}}, want: func(t *testing.T, r result) {
			if !r.OK {
				t.Fatalf("CONTROL FAILED: %s", r)
			}
			f := statusFields(r.Out)
			for k, want := range map[string]string{"CapEff": "0000000000000000", "CapPrm": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1"} {
				if f[k] != want {
					t.Errorf("ESCAPE: /proc/self/status %s is %q, want %q", k, f[k], want)
				}
			}
			if uid := strings.Fields(f["Uid"]); len(uid) == 0 || uid[0] == "0" {
				t.Errorf("ESCAPE: the command runs as the guest's root: %s", r)
			}
		}},
		{p: probe{Name: "su to root", Op: "sh", Args: []string{"su -c true root </dev/null"}}, want: denied()},
		{p: probe{Name: "setuid(0)", Op: "setuid"}, want: denied("EPERM")},
		{p: probe{Name: "mount tmpfs", Op: "mount", Args: []string{"tmpfs", "none", "/tmp/m-tmpfs"}}, want: denied("EPERM")},

		// The network: the guest has its loopback and nothing else.
		{p: probe{Name: "network interfaces", Op: "read", Args: []string{"/proc/net/dev"}}, want: onlyLoopback},
		{p: probe{Name: "dial the host's loopback listener", Op: "dial", Args: []string{"tcp", loAddr}}, want: denied("ECONNREFUSED"), host: same(probe{Op: "dial", Args: []string{"tcp", loAddr}})},
		{p: probe{Name: "dial the host's abstract Unix socket", Op: "dial", Args: []string{"unix", abstractName}}, want: denied("ECONNREFUSED"), host: same(probe{Op: "dial", Args: []string{"unix", abstractName}})},
		{p: probe{Name: "TCP to 8.8.8.8:53", Op: "dial", Args: []string{"tcp", "8.8.8.8:53"}, Guard: true}, want: denied("ENETUNREACH")},
		{p: probe{Name: "UDP to 8.8.8.8:53", Op: "udp-send", Args: []string{"8.8.8.8:53"}, Guard: true}, want: denied("ENETUNREACH")},
		{p: probe{Name: "vsock socket", Op: "socket", Args: []string{"vsock"}}, want: denied()},
	})
	if n := lo.settle(1); n != 1 {
		t.Errorf("ESCAPE?: the host's loopback listener accepted %d connections, want the host control's 1", n)
	}
	if n := abstract.settle(1); n != 1 {
		t.Errorf("ESCAPE?: the host's abstract socket accepted %d connections, want the host control's 1", n)
	}
}
