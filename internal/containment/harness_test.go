package containment

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mrand "math/rand/v2"

	"github.com/paddockhq/paddock/internal/capability"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/testenv"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// defaultLimits are generous enough for every probe and small enough to matter.
var defaultLimits = wire.Limits{Memory: 256 << 20, Pids: 128, Timeout: 60 * time.Second}

// Every sandbox of the suite runs as a uid of its own, far above any real user's, so that
// "no process of this sandbox is left" can be checked by uid even while other sandboxes
// (this suite's or another test run's) are alive.
var lastUID = atomic.Uint32{}

func init() { lastUID.Store(400000 + mrand.Uint32N(500)*1000) }

func nextUID() uint32 { return lastUID.Add(1) }

// harness is a runner over the test's own temporary data and state directories.
type harness struct {
	cfg runner.Config
	r   *runner.Runner
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	testenv.RequireRoot(t)
	cfg := testenv.Config(t)
	cfg.SandboxUID = nextUID()
	cfg.SandboxGID = cfg.SandboxUID
	return &harness{cfg: cfg, r: runner.New(cfg, testenv.Logger(t))}
}

// box is a long-lived container-tier sandbox with the probe helper in its workspace.
type box struct {
	h    *harness
	sb   *runner.Sandbox
	uid  uint32
	ws   string // host path of the workspace
	pc   pb.ProcessClient
	once sync.Once
}

type boxOpts struct {
	limits wire.Limits
	env    []string
	// defaultWorkspace lets the runner make the workspace (under its data dir) instead of
	// the suite giving it one of its own.
	defaultWorkspace bool
	// persistent makes a persistent sandbox (as the control plane does: its workspace and
	// history are paddock's own), removed with its workspace at the end.
	persistent bool
	// capabilities, when set, is a control plane's capability keyring: the sandbox's agent
	// gets the keyring derived from it for the sandbox, as the control plane gives it.
	capabilities *capability.Keyring
	// tier is the sandbox's tier; zero is the container tier.
	tier wire.Tier
}

// newBox creates a sandbox and registers its destruction, with a check that nothing of it
// is left, for the end of the test.
func (h *harness) newBox(t *testing.T, o boxOpts) *box {
	t.Helper()
	if o.limits == (wire.Limits{}) {
		o.limits = defaultLimits
	}
	if o.tier == "" {
		o.tier = wire.TierContainer
	}
	spec := runner.Spec{User: "t", Tier: o.tier, Limits: o.limits, Env: o.env}
	if o.tier == wire.TierContainer {
		spec.Runtime = *ociRuntime
	}
	uid := h.cfg.SandboxUID
	if o.persistent {
		spec.ID, spec.Persistent = runner.NewID(), true
		t.Cleanup(func() { _ = h.r.RemoveWorkspace(spec.User, spec.ID) })
	} else if !o.defaultWorkspace {
		uid = nextUID()
		spec.Workspace = newWorkspace(t, uid)
	}
	if o.capabilities != nil {
		if spec.ID == "" {
			spec.ID = runner.NewID()
		}
		agentKeys, err := o.capabilities.ForAgent("sandbox:" + spec.ID)
		if err != nil {
			t.Fatal(err)
		}
		spec.CapabilityKeys = string(agentKeys.Export())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sb, err := h.r.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	b := &box{h: h, sb: sb, uid: uid, ws: sb.Workspace, pc: sb.Agent().Process()}
	t.Cleanup(func() { b.destroy(t) })
	if sb.Tier != o.tier {
		t.Fatalf("asked for the %s tier, got %s", o.tier, sb.Tier)
	}
	installProbe(t, b.ws)
	return b
}

// destroy destroys the sandbox and fails the test if anything of it is left.
func (b *box) destroy(t *testing.T) {
	t.Helper()
	b.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := b.sb.Destroy(ctx); err != nil {
			t.Errorf("destroy sandbox %s: %v", b.sb.ID, err)
		}
		hostUID, _ := b.sb.HostUser()
		b.h.assertNoLeftovers(t, b.sb.ID, hostUID)
	})
}

// exec runs a shell script in the sandbox through the agent and returns its output.
func (b *box) exec(t *testing.T, script string) (*pb.ExecuteResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return b.pc.Execute(ctx, &pb.ExecuteRequest{Argv: []string{"sh", "-c", script}, TimeoutMs: 20000})
}

// mustExec is exec for the test's own setup: anything but exit 0 is fatal.
func (b *box) mustExec(t *testing.T, script string) string {
	t.Helper()
	resp, err := b.exec(t, script)
	if err != nil {
		t.Fatalf("execute %q: %v", script, err)
	}
	if resp.GetStatus().GetExitCode() != 0 {
		t.Fatalf("execute %q: %+v\nstdout: %s\nstderr: %s", script, resp.GetStatus(), resp.GetStdout(), resp.GetStderr())
	}
	return string(resp.GetStdout())
}

// probe runs probes inside the sandbox and returns their results by name.
func (b *box) probe(t *testing.T, probes []probe) map[string]result {
	t.Helper()
	arg, err := json.Marshal(probes)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	resp, err := b.pc.Execute(ctx, &pb.ExecuteRequest{
		Argv: []string{"/workspace/" + probeBinary, probeArg, string(arg)}, TimeoutMs: 80000, MaxOutputBytes: 16 << 20,
	})
	if err != nil {
		t.Fatalf("run probes in the sandbox: %v", err)
	}
	if st := resp.GetStatus(); st.GetExitCode() != 0 {
		t.Fatalf("probe helper in the sandbox: %+v\nstderr: %s", st, resp.GetStderr())
	}
	return parseResults(t, "sandbox", probes, resp.GetStdout())
}

// hostProbe runs probes as a plain host process (root, in a mount namespace of its own so
// that mount controls change nothing), for the positive controls.
func hostProbe(t *testing.T, probes []probe) map[string]result {
	t.Helper()
	if len(probes) == 0 {
		return nil
	}
	arg, err := json.Marshal(probes)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(selfExe(t), probeArg, string(arg))
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe helper on the host: %v\n%s", err, stderr.Bytes())
	}
	return parseResults(t, "host", probes, out)
}

func parseResults(t *testing.T, where string, probes []probe, out []byte) map[string]result {
	t.Helper()
	res := map[string]result{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var r result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s probe output: %v: %q", where, err, sc.Text())
		}
		res[r.Name] = r
	}
	for _, p := range probes {
		if _, ok := res[p.Name]; !ok {
			t.Fatalf("%s probe helper gave no result for %q; output:\n%s", where, p.Name, out)
		}
	}
	return res
}

// check is one containment assertion: a probe run in the sandbox, what must come of it,
// and optionally the same attempt made by a plain host process, where it must succeed.
type check struct {
	p    probe
	want func(t *testing.T, r result)
	// host, when set, is the probe's positive control: run as a plain host process, it must
	// succeed (or pass hostWant, when set).
	host     *probe
	hostWant func(t *testing.T, r result)
}

// runChecks runs every check's probe in one batch in b, their host controls in one batch
// on the host, and reports each check as a subtest of its own.
func runChecks(t *testing.T, b *box, checks []check) {
	t.Helper()
	var in, host []probe
	for _, c := range checks {
		in = append(in, c.p)
		if c.host != nil {
			hp := *c.host
			hp.Name = c.p.Name + "@host"
			host = append(host, hp)
		}
	}
	start := time.Now()
	got := b.probe(t, in)
	t.Logf("%d probes in the sandbox took %s", len(in), time.Since(start))
	gotHost := hostProbe(t, host)
	for _, c := range checks {
		t.Run(c.p.Name, func(t *testing.T) {
			t.Logf("in the sandbox: %s", got[c.p.Name])
			if c.host != nil {
				t.Logf("on the host: %s", gotHost[c.p.Name+"@host"])
				want := c.hostWant
				if want == nil {
					want = hostSucceeds
				}
				want(t, gotHost[c.p.Name+"@host"])
			}
			c.want(t, got[c.p.Name])
		})
	}
}

// denied: the attempt must fail (with one of errnos, when given).
func denied(errnos ...string) func(*testing.T, result) {
	return func(t *testing.T, r result) {
		t.Helper()
		if r.OK {
			t.Errorf("ESCAPE: %s", r)
			return
		}
		if len(errnos) > 0 && !slices.Contains(errnos, r.Errno) {
			t.Errorf("denied, but not by the layer expected (want errno %v): %s", errnos, r)
		}
	}
}

// allowed: an in-sandbox positive control that must succeed.
func allowed(t *testing.T, r result) {
	t.Helper()
	if !r.OK {
		t.Errorf("CONTROL FAILED: this must work inside the sandbox, or the denials next to it prove nothing: %s", r)
	}
}

func hostSucceeds(t *testing.T, r result) {
	t.Helper()
	if !r.OK {
		t.Errorf("CONTROL FAILED: the same probe as a plain host process should succeed, so that its failure in the sandbox means something: %s", r)
	}
}

// outContains: the attempt succeeds and its output holds every one of subs.
func outContains(subs ...string) func(*testing.T, result) {
	return func(t *testing.T, r result) {
		t.Helper()
		if !r.OK {
			t.Errorf("CONTROL FAILED: %s", r)
			return
		}
		for _, s := range subs {
			if !strings.Contains(r.Out, s) {
				t.Errorf("CONTROL FAILED: want %q in the output: %s", s, r)
			}
		}
	}
}

// notShown: whether or not the attempt succeeds, its output holds none of subs.
func notShown(subs ...string) func(*testing.T, result) {
	return func(t *testing.T, r result) {
		t.Helper()
		for _, s := range subs {
			if strings.Contains(r.Out, s) {
				t.Errorf("ESCAPE: %q is visible: %s", s, r)
			}
		}
	}
}

// empty: the attempt fails, or succeeds and shows nothing (a masked path).
func empty(t *testing.T, r result) {
	t.Helper()
	if r.OK && strings.TrimSpace(r.Out) != "" {
		t.Errorf("ESCAPE: the path should be masked (absent, unreadable or empty): %s", r)
	}
}

// nonEmpty is the host control of a masked path: there, it has something to hide.
func nonEmpty(t *testing.T, r result) {
	t.Helper()
	if !r.OK || strings.TrimSpace(r.Out) == "" {
		t.Errorf("CONTROL FAILED: on the host this should show something, or masking it proves nothing: %s", r)
	}
}

// same is a host control that repeats the sandbox probe unchanged.
func same(p probe) *probe { return &p }

// probeBinary is the helper's name in a workspace.
const probeBinary = "probe"

var (
	exeOnce sync.Once
	exePath string
	exeErr  error
)

func selfExe(t *testing.T) string {
	t.Helper()
	exeOnce.Do(func() { exePath, exeErr = os.Executable() })
	if exeErr != nil {
		t.Fatal(exeErr)
	}
	return exePath
}

// installProbe puts the test binary, which is the probe helper, into a workspace: hard
// linked when it can be, copied otherwise.
func installProbe(t *testing.T, ws string) {
	t.Helper()
	dst := filepath.Join(ws, probeBinary)
	if err := os.Link(selfExe(t), dst); err == nil {
		return
	}
	in, err := os.Open(selfExe(t))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// newWorkspace makes a workspace owned by uid, so that the sandbox runs as uid. It lives
// straight under the host's temporary directory, which any user may traverse: the setuid
// control runs a file in it as uid on the host.
func newWorkspace(t *testing.T, uid uint32) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pdkc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, int(uid), int(uid)); err != nil {
		t.Fatal(err)
	}
	return dir
}

// traces lists what of sandbox id (running as uid) exists on the host: its state
// directory, the OCI runtime's record of it, its cgroups, its workspace when the runner
// made it, and its processes.
func (h *harness) traces(id string, uid uint32) []string {
	var found []string
	for _, p := range []string{
		filepath.Join(h.cfg.StateDir, "sandboxes", id),
		filepath.Join(h.cfg.StateDir, "runc", id),
		filepath.Join(h.cfg.WorkspaceRoot, "t", "tmp", id),
	} {
		if _, err := os.Lstat(p); err == nil {
			found = append(found, p)
		}
	}
	// runsc keeps its state in files named after the container and its sandbox.
	runsc, _ := filepath.Glob(filepath.Join(h.cfg.StateDir, "runsc", "*"+id+"*"))
	found = append(found, runsc...)
	cgroups, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", "paddock", id))
	if v2, err := os.Stat(filepath.Join("/sys/fs/cgroup/paddock", id)); err == nil && v2.IsDir() {
		cgroups = append(cgroups, filepath.Join("/sys/fs/cgroup/paddock", id))
	}
	found = append(found, cgroups...)
	return append(append(found, processesOf(uid)...), processesInCgroup(id)...)
}

// processesInCgroup lists the host's live processes in a cgroup of the sandbox: the agent
// (the container's root, so not found by uid) and anything it started.
func processesInCgroup(id string) []string {
	var procs []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cg, err := os.ReadFile(filepath.Join(d, "cgroup"))
		if err != nil || !strings.Contains(string(cg), "/paddock/"+id+"\n") && !strings.Contains(string(cg), "/paddock/"+id+"/") {
			continue
		}
		data, _ := os.ReadFile(filepath.Join(d, "status"))
		f := statusFields(string(data))
		if strings.HasPrefix(f["State"], "Z") {
			continue
		}
		procs = append(procs, fmt.Sprintf("process %s (%s, in cgroup /paddock/%s, state %s)", filepath.Base(d), f["Name"], id, f["State"]))
	}
	return procs
}

// processesOf lists the host's live processes whose real or effective uid is uid. Zombies
// are not counted: they hold nothing but a pid until their parent (for a detached
// container, the host's init) reaps them.
func processesOf(uid uint32) []string {
	var procs []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		data, err := os.ReadFile(filepath.Join(d, "status"))
		if err != nil {
			continue
		}
		f := statusFields(string(data))
		ids := strings.Fields(f["Uid"])
		if len(ids) < 2 || strings.HasPrefix(f["State"], "Z") {
			continue
		}
		if u := strconv.Itoa(int(uid)); ids[0] == u || ids[1] == u {
			procs = append(procs, fmt.Sprintf("process %s (%s, uid %d, state %s)", filepath.Base(d), f["Name"], uid, f["State"]))
		}
	}
	return procs
}

// statusFields parses a /proc/<pid>/status file.
func statusFields(status string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(status, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// assertNoLeftovers waits briefly for sandbox id to be gone from the host, then fails the
// test with whatever is left.
func (h *harness) assertNoLeftovers(t *testing.T, id string, uid uint32) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if left = h.traces(id, uid); len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("LEFTOVER: sandbox %s is gone but left on the host:\n  %s", id, strings.Join(left, "\n  "))
	}
}

// run runs spec's main command with `paddock run`'s code path, then checks nothing of it
// is left.
func (h *harness) run(t *testing.T, spec runner.Spec) (res runner.Result, stdout, stderr string, took time.Duration) {
	t.Helper()
	spec.User, spec.Tier = "t", wire.TierContainer
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	start := time.Now()
	res, err := h.r.Run(ctx, spec, runner.Stdio{Stdout: &out, Stderr: &errb}, false)
	took = time.Since(start)
	if err != nil {
		t.Fatalf("run %q: %v\nstderr: %s", spec.Main, err, errb.String())
	}
	h.assertNoLeftovers(t, res.Sandbox, h.cfg.SandboxUID)
	return res, out.String(), errb.String(), took
}
