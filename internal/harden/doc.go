// Package harden confines the calling process for good, before it runs untrusted code: the
// in-sandbox agent of the insecure "process" tier calls Apply on itself, and every child it
// spawns afterwards (the user's command) inherits the confinement.
//
// Apply runs four steps in order and reports each one as ok, unsupported or failed, both in the
// returned Report and as a structured log event (msg "harden", attrs step, status, detail):
//
//  1. rlimits: RLIMIT_CORE 0 (no core dumps of sandbox memory), RLIMIT_NOFILE and RLIMIT_FSIZE
//     when configured, soft and hard so the sandbox cannot raise them again. RLIMIT_NPROC is
//     not used: it counts every process of the uid, not of the sandbox; the cgroup's pids
//     limit is the process cap.
//  2. no_new_privs on every thread: execve can no longer gain privileges (setuid, file
//     capabilities), and it lets an unprivileged process install Landlock and seccomp.
//  3. Landlock, at the highest ABI the kernel offers: read and execute beneath Config.ReadOnly,
//     read-write beneath Workspace and TempDir and on Config.ReadWriteFiles, nothing else; TCP
//     bind denied and TCP connect denied except to Config.AllowConnectTCP (ABI 4+); signals to
//     and abstract-socket connections to processes outside the sandbox's Landlock domain denied
//     (ABI 6+). Each part is checked after enforcement by attempting an access it must deny, so
//     a layer that silently did nothing is reported as failed, never as ok.
//  4. seccomp (installed on all threads with TSYNC): a deny list of kernel attack surface and
//     sandbox-escape primitives: ptrace and cross-process memory access, namespaces (unshare,
//     setns, clone with CLONE_NEW*, clone3), mount APIs, keyrings, bpf, perf, userfaultfd,
//     io_uring, kexec and modules, socket families other than unix/inet/inet6, the ways
//     around Landlock's TCP rules (MPTCP and SCTP sockets, TCP Fast Open from sendto/sendmsg),
//     TIOCSTI/TIOCLINUX, personality changes. A syscall made through another architecture's
//     or ABI's entry point (i386, x32) kills the process, because the deny list is written in
//     the native numbers and would not match.
//
// # Threat model
//
// The attacker controls the code the agent runs (the user's command and anything it starts)
// and wants to read or change host files outside the workspace, reach the network, take over
// other processes, or escalate through the kernel. The host already runs the agent as a
// dedicated unprivileged uid in its own cgroup; this package narrows what that uid's processes
// can do.
//
// # Limits of this tier
//
// The sandbox is a host process: there are no namespaces. It shares the host's PID, network,
// IPC, mount and UTS namespaces, so it can:
//   - see every host process and its command line in /proc, if Config.ReadOnly lists /proc;
//   - use UDP to any address and port (Landlock restricts UDP only from ABI 10), which
//     includes DNS to any resolver: this is an exfiltration channel;
//   - connect to pathname UNIX sockets anywhere the uid's file permissions allow, on kernels
//     below Landlock ABI 9 (the X11 socket, a D-Bus socket, an ssh-agent socket in /tmp);
//   - use System V IPC and POSIX message queues of the same uid;
//   - read files beneath the ReadOnly directories (all of /etc is readable if /etc is listed);
//   - exhaust host resources not covered by the cgroup or the rlimits (disk space in the
//     workspace beyond RLIMIT_FSIZE per file, inodes, ephemeral ports).
//
// Landlock does not restrict operations on file descriptors opened before Apply, nor
// processes already running; seccomp cannot look at pointer arguments (paths, clone3's
// struct), so clone3 is refused outright and glibc falls back to clone. Neither layer helps
// against a kernel bug reachable through an allowed syscall. Use the container or microVM
// tier for untrusted code that must not be able to reach the host.
package harden
