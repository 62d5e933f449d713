// Package runner turns a request for a sandbox into a running one: it resolves the tier,
// provisions the workspace, applies limits, starts the tier's backend with the agent
// inside, and tears everything down again. `paddock run` and the control plane both go
// through it.
package runner

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/sandbox/agentclient"
	"github.com/paddockhq/paddock/internal/sandbox/container"
	"github.com/paddockhq/paddock/internal/sandbox/microvm"
	"github.com/paddockhq/paddock/internal/sandbox/process"
	"github.com/paddockhq/paddock/internal/tunnel"
	"github.com/paddockhq/paddock/internal/wire"
)

// Runner creates and destroys sandboxes.
type Runner struct {
	cfg Config
	log *slog.Logger

	// accel is the microVM tier's accelerator, decided by the first microVM start (see
	// microvmAccel).
	accelMu sync.Mutex
	accel   *microvm.Probe

	// kube is the cluster sandboxes run on (Config.Cluster), opened on first use.
	clusterMu sync.Mutex
	kube      Cluster
}

// New returns a Runner for cfg.
func New(cfg Config, log *slog.Logger) *Runner { return &Runner{cfg: cfg, log: log} }

// Spec is a request for a sandbox.
type Spec struct {
	// ID names the sandbox; empty means a fresh one. The control plane passes the ID of its
	// record, so that a sandbox keeps its ID across stop and start.
	ID string
	// Persistent keeps the workspace across Destroy: it lives at
	// <workspace_root>/<user>/sandboxes/<ID> until RemoveWorkspace. It needs an ID.
	Persistent bool
	// User owns the sandbox; its workspaces live under <workspace_root>/<user>.
	User string
	// Tier is the isolation tier; empty means the user's or the host's default.
	Tier wire.Tier
	// Insecure allows (and selects) the process tier.
	Insecure bool
	// Runtime is the OCI runtime of the container tier: "runc" (default) or "runsc".
	Runtime string
	// Workspace is a host directory bound at /workspace; empty means a fresh temporary one
	// that Destroy removes.
	Workspace string
	Limits    wire.Limits
	// Env is added to the sandbox's default environment ("K=V").
	Env []string
	// Main is the command line of the sandbox's main command.
	Main []string
	// RestartMain makes the agent supervise Main as the sandbox's app: it restarts it
	// whenever it exits, with backoff (wire.Command.Restart), and Agent.App reports it.
	// Off, Main runs once and the sandbox is done when it exits.
	RestartMain bool
	// MainDir is where Main runs, relative to the workspace; empty is the workspace.
	MainDir string
	// MainHotReload: Main reloads changed files itself; a restore does not restart it.
	MainHotReload bool
	// CapabilityKeys is the agent's capability keyring (wire.Envelope.CapabilityKeys).
	CapabilityKeys string
	// Pool starts the sandbox for the warm pool (pool.go): persistent, of the container
	// tier and the host's defaults, its files under the pool's directory until Claim. User
	// is ignored.
	Pool bool
	// PoolTemplate, with Pool, names the provider's template whose pool the sandbox is
	// for; on a cluster it is claimed from that template's SandboxWarmPool, which keeps
	// PoolSize pods started.
	PoolTemplate string
	PoolSize     int
	// Seed, when set, fills a persistent container sandbox's new workspace and history
	// store before it starts (a fork's, see history.Fork).
	Seed func(Seeding) error
	// DiskFrom, when set, is a persistent sandbox of User's whose disk image the new
	// sandbox's starts as a copy of (a fork's, see diskfork.go), where both have one;
	// Seeding.Copied says whether it did.
	DiskFrom string
	// ProveCopy, with DiskFrom, runs on the source's workspace while its file system is
	// frozen for the copy, beside it, and says whether the copy needs no restore
	// (history.ProveFrozen); Seeding.Proven is its answer.
	ProveCopy func(workspace string) bool
}

// Seeding is what Spec.Seed fills.
type Seeding struct {
	// Workspace and History are the new sandbox's workspace and history store.
	Workspace, History string
	// UID and GID are the sandbox user's, who owns what is written into the workspace.
	UID, GID uint32
	// Copied: the workspace is a copy of Spec.DiskFrom's disk image, not empty.
	Copied bool
	// Proven: Spec.ProveCopy proved the copy to be what the seed would make of it.
	Proven bool
}

// Sandbox is a running sandbox.
type Sandbox struct {
	ID        string
	Tier      wire.Tier
	Workspace string
	Limits    wire.Limits
	// Node is the cluster node the sandbox runs on; empty on this host.
	Node    string
	backend backend
	// agent calls the sandbox's agent over the backend's channel.
	agent *agentclient.Client
	// removeWorkspace is set when the workspace was made for this sandbox alone.
	removeWorkspace bool
	// History is the host directory of the workspace's history (persistent container
	// sandboxes only; see makeHistory).
	History string
	// uid and gid are the sandbox user's, which its commands run as (sandboxUser).
	uid, gid uint32
	// disk is the sandbox's disk image (disk.go), or nil.
	disk *disk
	// copied: disk started as a copy of Spec.DiskFrom's; proven: Spec.ProveCopy said yes.
	copied, proven bool
	// shared is the user's shared disk (shared.go) when the sandbox has it, or nil.
	shared *disk
	// releaseIDs gives back the host id range a microVM's QEMU runs as, or is nil;
	// hostUID and hostGID are QEMU's ids from it.
	releaseIDs       func()
	hostUID, hostGID uint32
}

// DiskFull reports whether the sandbox's disk limit is (nearly) reached: its disk image has
// less than a 256th of its size left. False without a disk.
func (s *Sandbox) DiskFull() bool { return s.disk.full() }

// backend is what a tier's sandbox gives the runner.
type backend interface {
	Conn() *grpc.ClientConn
	OOMKills() (uint64, error)
	Cgroup() string
	LastError() string
	Destroy(ctx context.Context) error
}

// hostIDs is what a backend whose sandbox user is another id on the host provides (the
// container tier's user namespaces).
type hostIDs interface {
	HostIDs(uid, gid uint32) (uint32, uint32)
}

// HostUser is the host uid and gid the sandbox's commands run as, as the host's process
// table and its files show them: the sandbox user's own, or under runc with a user
// namespace the ids of the sandbox's own range (container.Config.UserNS).
func (s *Sandbox) HostUser() (uid, gid uint32) {
	if s.hostUID != 0 {
		return s.hostUID, s.hostGID
	}
	if h, ok := s.backend.(hostIDs); ok {
		return h.HostIDs(s.uid, s.gid)
	}
	return s.uid, s.gid
}

// exitWatcher is what a backend that holds its agent's process provides.
type exitWatcher interface {
	Exited() <-chan struct{}
}

// Exited is closed once the sandbox's agent has exited, whatever ended it (Destroy
// included); nil where the tier holds no handle on the agent's process.
func (s *Sandbox) Exited() <-chan struct{} {
	if w, ok := s.backend.(exitWatcher); ok {
		return w.Exited()
	}
	return nil
}

// LastError is the last error the sandbox's agent or runtime logged.
func (s *Sandbox) LastError() string { return s.backend.LastError() }

// Cgroup is the sandbox's cgroup path (as in /sys/fs/cgroup/<controller><path> on v1).
func (s *Sandbox) Cgroup() string { return s.backend.Cgroup() }

// Agent is the typed client of the sandbox's agent.
func (s *Sandbox) Agent() *agentclient.Client { return s.agent }

// hostNet is what a backend that shares its network namespace with the host provides
// (the container tier under runc).
type hostNet interface {
	Listener(port int) net.Listener
	Dial(ctx context.Context, port int) (net.Conn, error)
}

// Listen returns a listener whose connections come from the sandbox's processes connecting
// to port on their own loopback, and only from them: the host's own listener in the
// sandbox's network namespace when it made one there (Config.HostPorts), else the agent's
// relay over the channel, which keeps idle connections ready. Every connection accepted
// is this sandbox's, whatever it sends.
func (s *Sandbox) Listen(port, idle int, log *slog.Logger) net.Listener {
	if hn, ok := s.backend.(hostNet); ok {
		if l := hn.Listener(port); l != nil {
			return l
		}
	}
	return tunnel.Listen(s.backend.Conn(), port, idle, log)
}

// DialPort connects to port on the sandbox's loopback: directly where the host shares the
// sandbox's network namespace, else through the agent's channel.
func (s *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if hn, ok := s.backend.(hostNet); ok {
		if c, err := hn.Dial(ctx, port); !errors.Is(err, errdefs.ErrUnavailable) {
			return c, err
		}
	}
	return tunnel.Dial(ctx, s.backend.Conn(), port)
}

// OOMKills counts processes the sandbox's memory limit has killed.
func (s *Sandbox) OOMKills() (uint64, error) { return s.backend.OOMKills() }

// ForksRefused counts the forks the sandbox's pids limit has refused
// (cgroups.Group.ForksRefused). In the microvm tier the cgroup holds QEMU, and the guest's
// own processes are not counted.
func (s *Sandbox) ForksRefused() (uint64, error) {
	g, err := cgroups.Load(s.Cgroup())
	if err != nil {
		return 0, err
	}
	return g.ForksRefused()
}

// Destroy kills everything in the sandbox and removes what the runner made for it.
func (s *Sandbox) Destroy(ctx context.Context) error {
	err := s.backend.Destroy(ctx)
	if s.releaseIDs != nil {
		s.releaseIDs()
	}
	if s.removeWorkspace {
		err = errors.Join(err, os.RemoveAll(s.Workspace))
	}
	return errors.Join(err, s.disk.close())
}

// Create starts a sandbox for spec. A sandbox that fails half-way is torn down completely.
func (r *Runner) Create(ctx context.Context, spec Spec) (*Sandbox, error) {
	uc, err := r.userConfig(spec)
	if err != nil {
		return nil, err
	}
	tier, err := r.resolveTier(spec, uc)
	if err != nil {
		return nil, err
	}
	limits, err := r.limits(spec.Limits, uc)
	if err != nil {
		return nil, err
	}
	if err := validEnv(spec.Env); err != nil {
		return nil, err
	}
	if r.cfg.OnCluster() {
		return r.createOnCluster(ctx, spec, tier, limits)
	}
	agentBin, err := findAgent(r.cfg.Agent)
	if err != nil {
		return nil, err
	}
	// Before anything is made, and before the accelerator's probe, which a guest that
	// cannot run the agent would mislead.
	if tier == wire.TierMicroVM {
		if err := microvm.CheckAgent(agentBin); err != nil {
			return nil, err
		}
	}
	id, err := sandboxID(spec)
	if err != nil {
		return nil, err
	}
	sb := &Sandbox{ID: id, Tier: tier, Limits: limits}
	if err := r.provision(spec, sb); err != nil {
		_ = sb.disk.close()
		return nil, err
	}
	if err := r.seed(spec, sb); err != nil {
		_ = sb.disk.close()
		return nil, err
	}
	r.log.Info("creating sandbox", "sandbox", sb.ID, "tier", tier, "user", spec.User, "workspace", sb.Workspace)
	if tier == wire.TierProcess {
		r.log.Warn("DEGRADED: process tier (--insecure): the command runs as a host process under Landlock, seccomp and rlimits, with no namespaces; sessions are unavailable", "sandbox", sb.ID)
	}
	sb.backend, err = r.start(ctx, spec, sb, agentBin)
	if err != nil {
		if sb.releaseIDs != nil {
			sb.releaseIDs()
		}
		if sb.removeWorkspace {
			_ = os.RemoveAll(sb.Workspace)
		}
		_ = sb.disk.close()
		return nil, err
	}
	sb.agent = agentclient.New(sb.backend.Conn())
	return sb, nil
}

// seed runs spec.Seed on sb's workspace and history, which must have one.
func (r *Runner) seed(spec Spec, sb *Sandbox) error {
	if spec.Seed == nil {
		return nil
	}
	if sb.History == "" || !spec.Persistent {
		return fmt.Errorf("only a persistent container sandbox keeps history to start from: %w", errdefs.ErrInvalidArgument)
	}
	s := Seeding{Workspace: sb.Workspace, History: sb.History, UID: r.cfg.SandboxUID, GID: r.cfg.SandboxGID, Copied: sb.copied, Proven: sb.proven}
	if sb.copied {
		// The copy's files are its source's sandbox user's, stored under the source's id
		// range; what the restore writes gets the same owner, so that the start gives them
		// all to the new sandbox's range at once (container's ownWorkspace).
		var st syscall.Stat_t
		if err := syscall.Lstat(sb.Workspace, &st); err != nil {
			return fmt.Errorf("fork: the copied workspace: %w", err)
		}
		s.UID, s.GID = st.Uid, st.Gid
	}
	return spec.Seed(s)
}

// HistoryOnHost says whether sandboxes' history stores are reached on this host (at
// HistoryDir), or only through their agents (a cluster's volumes, or HistoryThroughAgent).
func (r *Runner) HistoryOnHost() bool { return !r.cfg.OnCluster() && !r.cfg.HistoryThroughAgent }

// HistoryDir is where persistent sandbox id of user keeps its workspace history.
func (r *Runner) HistoryDir(user, id string) string {
	return filepath.Join(r.cfg.WorkspaceRoot, user, "history", id)
}

// userConfig is spec's user's configuration; a pooled sandbox has no user yet, and the
// host's defaults.
func (r *Runner) userConfig(spec Spec) (UserConfig, error) {
	if !spec.Pool {
		return r.cfg.LoadUser(spec.User)
	}
	if !spec.Persistent || (spec.Tier != "" && spec.Tier != wire.TierContainer) {
		return UserConfig{}, fmt.Errorf("a pooled sandbox is a persistent container sandbox: %w", errdefs.ErrInvalidArgument)
	}
	return UserConfig{Tier: wire.TierContainer}, nil
}

func (r *Runner) start(ctx context.Context, spec Spec, sb *Sandbox, agentBin string) (_ backend, err error) {
	dir, made, err := r.sandboxDir(sb.ID)
	if err != nil {
		return nil, err
	}
	// A failed start leaves no state directory; one that was there before (another
	// sandbox's, with the same ID) is not this start's to remove.
	defer func() {
		if err != nil && made {
			_ = container.RemoveState(dir)
		}
	}()
	main := &wire.Command{Argv: spec.Main, Restart: spec.RestartMain, HotReload: spec.MainHotReload}
	if spec.MainDir != "" {
		main.Cwd = spec.MainDir // relative: the agent takes it from the workspace
	}
	if len(spec.Main) == 0 {
		main = nil
	}
	// A workspace on a disk of paddock's own is the configured user's; the disk may still
	// be being mounted (openDiskAsync).
	uid, gid := r.cfg.SandboxUID, r.cfg.SandboxGID
	if sb.disk == nil || spec.Workspace != "" {
		uid, gid = r.sandboxUser(sb.Workspace)
	}
	sb.uid, sb.gid = uid, gid
	switch sb.Tier {
	case wire.TierContainer:
		rt, err := r.containerRuntime(spec.Runtime)
		if err != nil {
			return nil, err
		}
		env := spec.Env
		// A one-shot run leaves nothing behind, a shared disk included. Caches are worth
		// less than the sandbox: one that cannot have its user's shared disk (the host's
		// disk short of the reserve) starts with HOME in /tmp, as before. A pooled sandbox
		// has no user yet, and whoever claims it must not share a disk with the claimers of
		// its siblings: it keeps HOME in /tmp.
		if spec.Persistent && !spec.Pool && spec.User != "" {
			shared, serr := r.openShared(spec.User, uid, gid)
			if serr != nil {
				r.log.Warn("the sandbox starts without its user's shared disk: HOME and the caches are in /tmp", "sandbox", sb.ID, "user", spec.User, "err", serr)
			}
			sb.shared = shared
		}
		if sb.shared != nil {
			env = append(append([]string{}, sharedEnv...), spec.Env...)
		}
		cfg := container.Config{
			ID: sb.ID, Dir: dir, Workspace: sb.Workspace, History: sb.History, Agent: agentBin, UID: uid, GID: gid,
			Env: containerEnv(env), Main: main, Limits: sb.Limits, HostPorts: r.cfg.HostPorts,
			CapabilityKeys: spec.CapabilityKeys, FileSizeLimit: int64(sb.Limits.FileSize),
			UserNS: r.cfg.UserNS(), OwnWorkspace: spec.Workspace == "",
		}
		if sb.disk != nil {
			cfg.Ready = sb.disk.wait
			if sb.Limits.Tmp == 0 {
				cfg.Tmp = sb.disk.tmp()
			}
		}
		if sb.shared != nil {
			cfg.Shared = sb.shared.mount
		}
		return rt.Start(ctx, cfg)
	case wire.TierProcess:
		cfg := process.Config{
			ID: sb.ID, Dir: dir, Workspace: sb.Workspace, Agent: agentBin, UID: uid, GID: gid,
			Env: spec.Env, Main: main, Limits: cgroupLimits(sb.Limits), CapabilityKeys: spec.CapabilityKeys,
			FileSizeLimit: int64(sb.Limits.FileSize),
		}
		return process.Start(ctx, cfg, r.log)
	case wire.TierMicroVM:
		in, err := microvm.Locate(filepath.Join(InstallPrefix, "guest"))
		if err != nil {
			return nil, err
		}
		var hostUID, hostGID uint32
		if spec.Workspace == "" && os.Geteuid() == 0 {
			if hostUID, hostGID, err = r.qemuUser(dir, sb, uid, gid); err != nil {
				return nil, err
			}
			sb.hostUID, sb.hostGID = hostUID, hostGID
		}
		cfg := microvm.Config{
			HostUID: hostUID, HostGID: hostGID,
			ID: sb.ID, Dir: dir, Workspace: sb.Workspace, Agent: agentBin, UID: uid, GID: gid,
			Env: containerEnv(spec.Env), Main: main, Install: in, Accel: r.microvmAccel(ctx, in, agentBin, uid, gid),
			CapabilityKeys: spec.CapabilityKeys, FileSizeLimit: int64(sb.Limits.FileSize),
			Limits: sb.Limits,
		}
		return microvm.Start(ctx, cfg)
	}
	return nil, fmt.Errorf("tier %s: %w", sb.Tier, errdefs.ErrUnavailable)
}

// qemuUser gives a microVM of a workspace of paddock's own a host id range, as a runc
// sandbox has one: QEMU runs as the range's id for the sandbox user, which no host
// account has and no other sandbox runs as, and the workspace is given to it, with the
// guest's owners kept aside (microvm.PrepareWorkspace), so the guest's user stays uid. A
// persistent sandbox asks for the range its workspace already belongs to.
func (r *Runner) qemuUser(dir string, sb *Sandbox, uid, gid uint32) (uint32, uint32, error) {
	var st syscall.Stat_t
	_ = syscall.Lstat(sb.Workspace, &st)
	base, release, err := container.ClaimIDRange(dir, st.Uid)
	if err != nil {
		return 0, 0, fmt.Errorf("the microVM's host user: %w", err)
	}
	sb.releaseIDs = release
	hostUID, hostGID := container.SandboxHostID(base, uid), container.SandboxHostID(base, gid)
	if err := microvm.PrepareWorkspace(sb.Workspace, hostUID, hostGID, uid, gid); err != nil {
		return 0, 0, fmt.Errorf("workspace: %w", err)
	}
	return hostUID, hostGID, nil
}

// microvmAccel decides, once per Runner (and once per boot of the host, through
// microvm.DetectAccel's cache in the state directory), whether guests run under KVM, and
// logs what it decided and why.
func (r *Runner) microvmAccel(ctx context.Context, in microvm.Install, agentBin string, uid, gid uint32) microvm.Accel {
	r.accelMu.Lock()
	defer r.accelMu.Unlock()
	if r.accel == nil {
		p := microvm.DetectAccel(ctx, in, agentBin, r.cfg.StateDir, uid, gid)
		r.log.Info("microvm accelerator", "accel", p.Accel, "reason", p.Reason, "cached", p.Cached, "took", p.Took.Round(time.Millisecond))
		if ctx.Err() != nil {
			return p.Accel // the caller gave up: decide again next time
		}
		r.accel = &p
	}
	return r.accel.Accel
}

// stateDir is <state_dir>/sandboxes/<id>: sandbox id's runtime state.
func (r *Runner) stateDir(id string) string {
	return filepath.Join(r.cfg.StateDir, "sandboxes", id)
}

// sandboxDir makes <state_dir>/sandboxes/<id>. The directories on the way are 0711:
// traversable but not listable, so that a process-tier sandbox's user reaches its own
// private tmp inside (0700, its own) without seeing other sandboxes. made says whether
// this call made <id> (it did not exist).
func (r *Runner) sandboxDir(id string) (dir string, made bool, err error) {
	dir = r.stateDir(id)
	for _, d := range []string{r.cfg.StateDir, filepath.Dir(dir)} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return "", false, fmt.Errorf("state dir: %w", err)
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return "", false, fmt.Errorf("state dir: %w", err)
		}
	}
	err = os.Mkdir(dir, 0o711)
	made = err == nil
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return "", false, fmt.Errorf("state dir: %w", err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		if made {
			_ = os.Remove(dir)
		}
		return "", false, fmt.Errorf("state dir: %w", err)
	}
	return dir, made, nil
}

func (r *Runner) containerRuntime(name string) (*container.Runtime, error) {
	switch name {
	case "", "runc":
		bin, err := findBinary(r.cfg.Runc, "runc")
		if err != nil {
			return nil, err
		}
		if err := checkRunc(bin, r.cfg.StateDir); err != nil {
			return nil, err
		}
		return container.Runc(bin, filepath.Join(r.cfg.StateDir, "runc"), r.log), nil
	case "runsc":
		bin, err := findBinary(r.cfg.Runsc, "runsc")
		if err != nil {
			return nil, err
		}
		return container.Runsc(bin, filepath.Join(r.cfg.StateDir, "runsc"), r.log), nil
	}
	return nil, fmt.Errorf("runtime %q: want runc or runsc: %w", name, errdefs.ErrInvalidArgument)
}

// resolveTier picks the tier: --insecure forces process; process never without it; the
// default is the configured one, else container (see DefaultTierReason).
func (r *Runner) resolveTier(spec Spec, uc UserConfig) (wire.Tier, error) {
	if spec.Tier != "" && !spec.Tier.Valid() {
		_, err := wire.ParseTier(string(spec.Tier))
		return "", err
	}
	switch {
	case spec.Insecure && spec.Tier != "" && spec.Tier != wire.TierProcess:
		return "", fmt.Errorf("--insecure selects the process tier; it cannot be combined with --tier %s: %w", spec.Tier, errdefs.ErrInvalidArgument)
	case spec.Insecure:
		return wire.TierProcess, nil
	case spec.Tier == wire.TierProcess:
		return "", fmt.Errorf("the process tier is insecure (a host process, no namespaces): pass --insecure to use it: %w", errdefs.ErrPermissionDenied)
	case spec.Tier == wire.TierMicroVM && r.cfg.OnCluster():
		return spec.Tier, nil // the cluster's RuntimeClass, if it has one
	case spec.Tier == wire.TierMicroVM:
		if _, err := microvm.Locate(filepath.Join(InstallPrefix, "guest")); err != nil {
			return "", err
		}
		return spec.Tier, nil
	case spec.Tier != "":
		return spec.Tier, nil
	}
	for _, t := range []wire.Tier{uc.Tier, r.cfg.Tier} {
		if t != "" {
			return r.resolveTier(Spec{Tier: t}, UserConfig{})
		}
	}
	return wire.TierContainer, nil
}

// DefaultTierReason says which tier a sandbox gets when nothing asks for one, and why;
// the control plane logs it at start.
func (r *Runner) DefaultTierReason() (wire.Tier, string) {
	if r.cfg.Tier != "" {
		return r.cfg.Tier, "set by the configuration (tier)"
	}
	return wire.TierContainer, "microvm is opt-in (tier: microvm or --tier microvm): a microVM has no workspace history and no network yet, whether or not KVM works here"
}

func (r *Runner) limits(asked wire.Limits, uc UserConfig) (wire.Limits, error) {
	if err := asked.Validate(""); err != nil {
		return wire.Limits{}, err
	}
	// A quota above the host's CPUs limits nothing: say so rather than accept it.
	if n := runtime.NumCPU(); asked.CPUs > float64(n) {
		return wire.Limits{}, fmt.Errorf("cpus: %g is more than this host's %d CPUs: %w", asked.CPUs, n, errdefs.ErrInvalidArgument)
	}
	l := asked.Or(uc.Limits).Or(r.cfg.Limits)
	if err := l.Over(r.cfg.MaxLimits); err != nil {
		return wire.Limits{}, err
	}
	return l, l.CheckTmp()
}

func validEnv(env []string) error {
	for _, kv := range env {
		if !wire.ValidEnvEntry(kv) {
			return fmt.Errorf("--env %q: want NAME=VALUE: %w", kv, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// sandboxUser is the user commands run as: the workspace's owner when that is a host user
// other than root (their files stay theirs), the configured sandbox user otherwise (a
// workspace of paddock's own is owned by its sandbox's range: see container.ownWorkspace).
func (r *Runner) sandboxUser(workspace string) (uid, gid uint32) {
	var st syscall.Stat_t
	if err := syscall.Stat(workspace, &st); err == nil && st.Uid != 0 && st.Gid != 0 && !container.IsRangeID(st.Uid) {
		return st.Uid, st.Gid
	}
	return r.cfg.SandboxUID, r.cfg.SandboxGID
}

// sandboxID is the ID asked for, checked, or a fresh one.
func sandboxID(spec Spec) (string, error) {
	switch {
	case spec.ID == "" && spec.Persistent:
		return "", fmt.Errorf("a persistent workspace needs a sandbox ID: %w", errdefs.ErrInvalidArgument)
	case spec.ID == "":
		return newID(), nil
	case !ValidID(spec.ID):
		return "", invalidID(spec.ID)
	}
	return spec.ID, nil
}

// ValidID reports whether id is a sandbox ID as newID makes them. IDs name directories
// and containers, so nothing else is accepted.
func ValidID(id string) bool {
	if len(id) != 13 || !strings.HasPrefix(id, "sb-") {
		return false
	}
	return strings.Trim(id[3:], "abcdefghijklmnopqrstuvwxyz234567") == ""
}

func invalidID(id string) error {
	return fmt.Errorf("sandbox ID %q: want sb- and 10 characters of a-z2-7: %w", id, errdefs.ErrInvalidArgument)
}

// NewID returns a fresh sandbox ID.
func NewID() string { return newID() }

// newID returns a fresh sandbox ID: "sb-" and 10 lower-case base32 characters.
func newID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[b[i]%32]
	}
	return "sb-" + string(b)
}

// ForkMode is what ForkHistory does.
type ForkMode int

const (
	// ForkCheck only finds the checkpoint.
	ForkCheck ForkMode = iota
	// ForkFiles writes the checkpoint's files into an empty workspace (history.Fork).
	ForkFiles
	// ForkOverCopy restores the checkpoint over a copy of the source's disk image
	// (history.ForkOverCopy).
	ForkOverCopy
	// ForkOverProvenCopy records the checkpoint's restore over a copy proven to be it
	// (history.ForkOverProvenCopy).
	ForkOverProvenCopy
	// ForkProve proves that workspace, the source's, frozen, is the checkpoint
	// (history.ProveFrozen): wire.ForkInfo.Proven.
	ForkProve
)

// ForkHistory forks the history store src into dst, with checkpoint at's files put into
// workspace as uid:gid as mode says (see wire.ForkHistorySubcommand). The store's code
// runs in a process of the agent's binary: the control plane links none of it.
func (r *Runner) ForkHistory(ctx context.Context, src, dst, at, workspace string, uid, gid uint32, mode ForkMode) (wire.ForkInfo, error) {
	agentBin, err := findAgent(r.cfg.Agent)
	if err != nil {
		return wire.ForkInfo{}, err
	}
	args := []string{wire.ForkHistorySubcommand, "--src", src, "--at", at}
	switch mode {
	case ForkCheck:
		args = append(args, "--check")
	case ForkProve:
		args = append(args, "--prove", "--workspace", workspace)
	default:
		args = append(args, "--dst", dst, "--workspace", workspace, "--uid", strconv.Itoa(int(uid)), "--gid", strconv.Itoa(int(gid)))
	}
	switch mode {
	case ForkOverCopy:
		args = append(args, "--over-copy")
	case ForkOverProvenCopy:
		args = append(args, "--over-copy", "--proven")
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, agentBin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return wire.ForkInfo{}, fmt.Errorf("fork history: %v: %s: %w", err, errdefs.Clip(strings.TrimSpace(stderr.String()), 512), errdefs.ErrUnavailable)
	}
	var info wire.ForkInfo
	if err := json.Unmarshal(stdout.Bytes(), &info); err != nil {
		return wire.ForkInfo{}, fmt.Errorf("fork history: its answer: %w: %w", err, errdefs.ErrUnavailable)
	}
	if info.Code != 0 {
		return info, errdefs.FromGRPC(status.Error(codes.Code(info.Code), info.Message))
	}
	return info, nil
}

// ExportHistory streams the history store at dir as an export (see
// wire.ForkHistorySubcommand's --export), from a process of the agent's binary. The
// caller closes the reader; a failed export fails its last read.
func (r *Runner) ExportHistory(ctx context.Context, dir string) (io.ReadCloser, error) {
	agentBin, err := findAgent(r.cfg.Agent)
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, agentBin, wire.ForkHistorySubcommand, "--export", "--src", dir)
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("export history: %w: %w", err, errdefs.ErrUnavailable)
	}
	pr, pw := io.Pipe()
	go func() {
		_, cerr := io.Copy(pw, out)
		if err := cmd.Wait(); err != nil {
			cerr = fmt.Errorf("export history: %v: %s: %w", err, errdefs.Clip(strings.TrimSpace(stderr.String()), 512), errdefs.ErrUnavailable)
		}
		pw.CloseWithError(cerr)
	}()
	return pr, nil
}
