// Package agent is paddock-agent: the RPC server that runs inside every sandbox.
//
// The runner starts it as the sandbox's first process with a bootstrap envelope on its
// standard input and its listening socket inherited as a file descriptor. It starts the
// main command at once (so its first output does not wait for a client), then serves the
// Process, Files, Agent, Net and History services of proto/paddock/agent/v1 on that socket.
//
// History (see history.go and package history) checkpoints the workspace after the file
// API changes it, at the end of every exec, and once changes made by any process settle
// (debounced, see watchLoop); undo, redo and restore rewrite the workspace in place and restart the app. Its
// store is a directory the runner mounts outside the workspace, root's and 0700, so that the
// sandbox user's commands can neither read nor rewrite it; the process and microvm tiers
// have no such directory, and their History service says so (UNAVAILABLE).
//
// Threat model: everything else in the sandbox is hostile. In the container tier the agent
// runs as the container's root with a handful of capabilities and starts every command as
// the unprivileged sandbox user (envelope field run_as): across users the kernel stops a
// command from signalling, ptracing, renicing or prlimiting the agent, and file operations
// run with the sandbox user's filesystem identity (see package identity), so the file API
// is never more powerful than the user. The agent is also non-dumpable, so nothing can read
// its memory or environment through /proc. Its clients are trusted: only the host holds
// the other end of the channel, and a request may be bounded further by the capability
// token it carries (capability.go), which the agent verifies against what only it can
// know: the file a path really leads to and the programs a command line really runs. In
// the process tier the agent confines itself (Landlock, seccomp, rlimits) before it starts
// anything, and refuses sessions other than the main command, and port forwarding: without a network namespace of its own, the
// sandbox's loopback there is the host's. In the microvm tier the agent is the guest's init (VMInit): it sets up
// the guest, then serves on the VM's virtio-serial port, and the guest kernel is the
// boundary.
//
// gRPC was chosen over Connect for the channel: agent-sandbox's in-sandbox daemon draft
// (the closest public spec) is gRPC, and grpc-go runs its own HTTP/2 transport with flow
// control tuned for bulk streams, where Connect rides net/http. (Not measured side by side
// yet: docs/benchmarks.md has the gRPC figures only.)
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"github.com/paddockhq/paddock/internal/agent/desktop"
	"github.com/paddockhq/paddock/internal/agent/files"
	"github.com/paddockhq/paddock/internal/agent/identity"
	"github.com/paddockhq/paddock/internal/agent/session"
	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
	"github.com/paddockhq/paddock/internal/wire/channel"
)

// settleAfter is how long after it starts serving, and after a call ends, the agent
// returns its unused heap to the kernel (settle.go).
const settleAfter = 500 * time.Millisecond

// Version is the agent's version, reported by Info.
var Version = "dev"

// Confiner confines the agent in the process tier before it starts anything.
type Confiner func(env *wire.Envelope) error

// prewarmThreads makes the Go runtime create n OS threads now and keep them idle. A fork
// bomb in the sandbox exhausts the cgroup's pids limit, which counts threads; a Go program
// that then needs a new thread dies ("failed to create new OS thread"). With idle threads
// in reserve the agent keeps answering. Each goroutine locks itself to a thread of its own
// while all are blocked, then unlocks before returning, which returns the thread to the
// runtime's idle pool instead of ending it.
func prewarmThreads(n int) {
	var ready, release sync.WaitGroup
	ready.Add(n)
	release.Add(1)
	for range n {
		go func() {
			runtime.LockOSThread()
			ready.Done()
			release.Wait()
			runtime.UnlockOSThread()
		}()
	}
	ready.Wait()
	release.Done()
}

// Run serves the sandbox described by env on lis until ctx ends.
func Run(ctx context.Context, env *wire.Envelope, lis net.Listener, confine Confiner, log *slog.Logger) error {
	prewarmThreads(wire.ThreadReserve)
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("make agent non-dumpable: %w", err)
	}
	caps, err := newCapabilities(env, log)
	if err != nil {
		return err
	}
	if p := env.Process; p != nil && env.FileSizeLimit > 0 && (p.MaxFileSize == 0 || p.MaxFileSize > env.FileSizeLimit) {
		// The process tier's agent shares its user with its commands and keeps no history:
		// the file size limit is its own, which they inherit.
		p.MaxFileSize = env.FileSizeLimit
	}
	if env.Tier == wire.TierProcess {
		if confine == nil {
			return errors.New("process tier: no confinement available in this build")
		}
		if err := confine(env); err != nil {
			return fmt.Errorf("process tier: confine agent: %w", err)
		}
	}
	// The Manager's reaper waits for every child of the process: it stops before Run
	// returns, so that another agent in the same process (tests) is the only one reaping.
	mctx, stopReaper := context.WithCancel(ctx)
	m := session.NewManager(mctx, env.Workspace, defaultEnv(env), log)
	defer func() {
		stopReaper()
		<-m.ReaperDone()
	}()
	var user identity.User
	if env.RunAs != nil {
		user = identity.User{UID: env.RunAs.UID, GID: env.RunAs.GID}
		m.RunAs(user.UID, user.GID)
	}
	self, selfErr := os.Executable()
	if selfErr == nil && filepath.IsAbs(self) {
		m.SetSelf(self)
	}
	if t := env.Trampoline; t != "" {
		if fi, err := os.Stat(t); err == nil && fi.Mode().IsRegular() {
			m.SetSelf(t) // paddock-exec starts in a fraction of the agent's time
		}
	}
	if g, err := commandCgroups(env); err != nil {
		log.Warn("commands share the agent's cgroup", "err", err)
	} else if g != nil {
		m.UseCgroup(g)
	}
	if env.CommandNproc > 0 {
		if err := m.LimitProcesses(env.CommandNproc); err != nil {
			return fmt.Errorf("process limit: %w", err)
		}
	}
	if env.FileSizeLimit > 0 && env.Process == nil {
		err := selfErr
		if err == nil {
			err = m.LimitFileSize(env.FileSizeLimit, self)
		}
		if err != nil {
			return fmt.Errorf("file size limit: %w", err)
		}
	}
	// The host's services are up before the app starts, so that it can use them at once.
	nets := newNetService(env.Tier)
	if nets.refused == "" {
		var stop func()
		nets.services, stop = startServices(env.Env, env.HostPorts, log)
		defer stop()
	}
	// The desktop's port is the agent's before the app starts, so the app cannot take it.
	if nets.refused == "" {
		stop := serveDesktop(ctx, log)
		defer stop()
	}
	// The workspace is opened before the app starts, with nothing else in the sandbox
	// touching it: in a microVM, an open of the 9p share racing the app's first accesses has
	// been seen to fail with ENOENT (Linux 6.1 guest, QEMU 7.2), which ended the agent.
	fs, err := files.New(env.Workspace, log)
	if err != nil {
		return fmt.Errorf("open workspace: %w", err)
	}
	fs.ActAs(user)
	fs.GuardWith(caps)
	defer fs.Close()
	var app *supervisor
	if env.Main != nil {
		main := session.Spec{ID: wire.MainSessionID, Argv: env.Main.Argv, Env: env.Main.Env, Cwd: env.Main.Cwd, HoldOutput: true}
		if env.Main.Restart {
			app = newSupervisor(m, main, log)
			// Run returns only once the supervisor has, whatever ended the serving:
			// nothing of a sandbox's agent outlives it.
			supCtx, stop := context.WithCancel(ctx)
			supervised := make(chan struct{})
			go func() {
				defer close(supervised)
				app.run(supCtx)
			}()
			defer func() { stop(); <-supervised }()
		} else if _, err := m.StartMain(main); err != nil {
			return fmt.Errorf("start main command: %w", err)
		}
	}
	info := &pb.InfoResponse{SandboxId: env.SandboxID, Tier: string(env.Tier), AgentVersion: Version, SessionsAvailable: true, Workspace: env.Workspace}
	if env.Tier == wire.TierProcess {
		m.Disable(wire.ProcessTierReason)
		info.SessionsAvailable, info.SessionsUnavailableReason = false, wire.ProcessTierReason
		log.Warn("sessions unavailable", "tier", env.Tier, "reason", wire.ProcessTierReason)
	}
	hist := openHistory(env, user, log)
	hist.app = app
	defer hist.Close()
	// The reconciler ends before the store closes (defers run last first).
	hctx, stopHistory := context.WithCancel(ctx)
	var reconciling sync.WaitGroup
	defer func() { stopHistory(); reconciling.Wait() }()
	hist.stopping = hctx.Done()
	hist.start(hctx, &reconciling)
	settle := newSettler(debug.FreeOSMemory)
	defer settle.stop()
	srv := grpc.NewServer(append(channel.ServerOptions(), settle.options()...)...)
	pb.RegisterProcessServer(srv, &processService{m: m, hist: hist, ctx: hctx, caps: caps, gatedRoot: gatedRoot(env.GatedRoot)})
	pb.RegisterFilesServer(srv, &recordedFiles{Service: fs, hist: hist})
	pb.RegisterAgentServer(srv, &agentService{info: info, app: app, ownKernel: env.Tier == wire.TierMicroVM, ownCgroup: env.ListenAddr != ""})
	pb.RegisterNetServer(srv, nets)
	pb.RegisterHistoryServer(srv, hist)
	go func() {
		<-ctx.Done()
		stopWithin(srv, 2*time.Second)
	}()
	log.Info("agent serving", "sandbox", env.SandboxID, "tier", env.Tier, "version", Version)
	err = srv.Serve(lis)
	if errors.Is(err, grpc.ErrServerStopped) && ctx.Err() != nil {
		return nil // told to stop before Serve began: a clean stop all the same
	}
	return err
}

// gatedRoot is the envelope's gated root when it is there, else "".
func gatedRoot(dir string) string {
	if fi, err := os.Stat(dir); dir == "" || err != nil || !fi.IsDir() {
		return ""
	}
	return dir
}

// commandCgroups opens the commands' cgroup the host handed over as descriptors (by v1
// controller), kept from the commands; on v2 the agent makes it, moving itself into a
// leaf of its own first (cgroups.SplitV2). Nil without one.
func commandCgroups(env *wire.Envelope) (*cgroups.Group, error) {
	if len(env.CommandCgroups) == 0 {
		return nil, nil
	}
	dirs := map[string]string{}
	for c, fd := range env.CommandCgroups {
		unix.CloseOnExec(fd)
		dirs[c] = "/proc/self/fd/" + strconv.Itoa(fd)
	}
	if dir, ok := dirs[cgroups.Unified]; ok {
		return cgroups.SplitV2(dir, os.Getpid(), cgroups.Limits{MemoryBytes: env.CommandMemory, Pids: env.CommandPids})
	}
	return cgroups.Open(dirs)
}

// defaultEnv is the environment of commands that do not bring their own: the envelope's,
// then the sandbox's ID and tier, which the sandbox's own settings cannot override.
func defaultEnv(env *wire.Envelope) []string {
	return append(slices.Clip(env.Env), wire.SandboxIDEnv+"="+env.SandboxID, wire.TierEnv+"="+string(env.Tier))
}

func newNetService(tier wire.Tier) *netService {
	if tier == wire.TierProcess {
		return &netService{refused: ProcessTierForwardReason}
	}
	return &netService{}
}

func stopWithin(srv *grpc.Server, d time.Duration) {
	t := time.AfterFunc(d, srv.Stop)
	srv.GracefulStop()
	t.Stop()
}

// Bootstrap reads the envelope from stdin, takes the socket it names (a listening one, or
// with connected one connection), and runs.
func Bootstrap(ctx context.Context, stdin *os.File, connected bool, confine Confiner, log *slog.Logger) error {
	env, err := wire.ReadEnvelope(stdin)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	stdin.Close()
	lis, err := channelListener(env.ListenFD, connected)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	return Run(ctx, env, lis, confine, log)
}

func channelListener(fd int, connected bool) (net.Listener, error) {
	f := os.NewFile(uintptr(fd), "agent-channel")
	defer f.Close()
	if !connected {
		lis, err := net.FileListener(f)
		if err != nil {
			return nil, fmt.Errorf("listen_fd %d is not a listening socket: %w", fd, err)
		}
		return lis, nil
	}
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("listen_fd %d is not a connected socket: %w", fd, err)
	}
	return newOneConnListener(c), nil
}

type agentService struct {
	pb.UnimplementedAgentServer
	info *pb.InfoResponse
	app  *supervisor // nil without a supervised app
	// ownKernel is set where the sandbox's kernel is its own (a microVM's guest): its
	// counters are the sandbox's, not the host's.
	ownKernel bool
	// ownCgroup is set in a pod, whose memory cgroup is the sandbox's and visible only
	// from inside: its OOM kills are reported instead.
	ownCgroup bool
}

func (a *agentService) Info(context.Context, *pb.InfoRequest) (*pb.InfoResponse, error) {
	if !a.ownKernel && !a.ownCgroup {
		return a.info, nil
	}
	i := a.info
	kills := kernelOOMKills()
	if a.ownCgroup {
		kills = cgroupOOMKills()
	}
	return &pb.InfoResponse{SandboxId: i.SandboxId, Tier: i.Tier, AgentVersion: i.AgentVersion, SessionsAvailable: i.SessionsAvailable,
		SessionsUnavailableReason: i.SessionsUnavailableReason, Workspace: i.Workspace, KernelOomKills: kills}, nil
}

// cgroupOOMKills reads the OOM kills of the memory cgroup the agent's container sees as
// its own (cgroup v1's memory.oom_control, v2's memory.events); 0 when it cannot.
func cgroupOOMKills() uint64 {
	for _, f := range []string{"/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"} {
		if n, ok := counter(f, "oom_kill "); ok {
			return n
		}
	}
	return 0
}

// counter reads the value of the line starting with key in file f.
func counter(f, key string) (uint64, bool) {
	b, err := os.ReadFile(f)
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, key); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// kernelOOMKills reads the kernel's count of OOM kills since boot; 0 when it cannot.
func kernelOOMKills() uint64 {
	b, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func (a *agentService) App(context.Context, *pb.AppRequest) (*pb.AppStatus, error) {
	return a.app.App()
}

func (a *agentService) RestartApp(context.Context, *pb.RestartAppRequest) (*pb.AppStatus, error) {
	if a.app != nil {
		a.app.Restart()
	}
	return a.app.App() // a nil supervisor answers "no supervised app"
}

// serveDesktop serves the desktop's files on wire.DesktopPort of the sandbox's loopback
// until the returned stop is called. A port already taken (an agent in a test, sharing the
// host's network) leaves the desktop unserved, logged.
func serveDesktop(ctx context.Context, log *slog.Logger) (stop func()) {
	l, err := desktop.Listen(net.JoinHostPort("127.0.0.1", strconv.Itoa(wire.DesktopPort)))
	if err != nil {
		log.Warn("desktop not served", "port", wire.DesktopPort, "err", err)
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		desktop.Serve(ctx, l, log)
	}()
	return func() { cancel(); <-done }
}
