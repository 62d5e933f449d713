// Package containment is paddock's containment suite: it runs hostile commands inside
// container-tier sandboxes and asserts that every attempt to get out fails. It has no code
// of its own outside its tests.
//
// It runs under runc by default and under runsc (gVisor) with `-args -runtime=runsc`;
// `make test` runs both, and TestMicroVM (build tag microvm) runs the probes that mean
// something in a guest inside a microvm sandbox. Under runsc a few answers differ, because gVisor's kernel leaves
// things out (no core_pattern, no readable namespace files, no class/net in its sysfs), and
// three tests skip, saying why: what they check from the host (the user namespace's ids, the
// host-made network namespace, garbage on a second connection to the agent) does not exist
// there. Run under runsc, the suite found two gVisor bugs that broke its confinement or its
// programs (see scripts/patches/gvisor) and the host's environment in the Sentry.
//
// What the suite proves, on the host it runs on (root, cgroup v1 or v2, runc or runsc):
//
//   - Filesystem: the host's secrets (/etc/shadow, /root, /home), paddock's own data and
//     state directories and other sandboxes' workspaces are not reachable; the root is
//     read-only; /proc/<pid>/root does not lead back to the host; kernel interfaces are
//     masked; mount, mknod and setuid binaries give nothing.
//   - Process: the sandbox sees only its own processes and inherits no descriptor of the
//     agent's; the agent (PID 1) cannot be traced, read through /proc, killed by any signal
//     or have its limits changed from inside; no new namespace can be made; the process has
//     no capabilities, no_new_privs and a seccomp filter.
//   - Network: only loopback exists; the host's listeners (loopback, its other addresses,
//     abstract Unix sockets) and the outside world are unreachable, and DNS fails at once.
//   - Resources: fork and memory bombs and runaway commands are stopped by their limits,
//     and nothing of a sandbox (processes, cgroups, state) outlives it.
//   - Environment: nothing of the host's environment reaches the sandbox.
//   - The agent's own surface: its file API cannot be led out of the workspace by symlinks
//     or "..", and garbage on its socket costs only the connection that sent it.
//
// Every denial is paired with a positive control that shows the probe could have seen
// success: the same operation works on an allowed target inside the sandbox, or the same
// probe run as a plain host process reaches the target. A probe that cannot tell success
// from failure proves nothing, and a suite where everything is broken must not pass.
//
// The probes run inside the sandbox as the test binary itself (see probeArg): it is copied
// into the sandbox's workspace and executed there, so probes make exact system calls and
// report exact errnos without depending on tools the host may lack. The same binary runs
// the same probes on the host for the controls.
//
// Workplace rule the network tests keep: nothing is ever sent to an address that is not
// loopback. Probes that aim at outside addresses run only after the sandbox has been shown
// to have no interface but lo, so the kernel refuses them before anything leaves.
//
// Threat model: the command in the sandbox is hostile and runs with the same uid as the
// agent; the host, the runner and the agent's clients are trusted.
package containment
