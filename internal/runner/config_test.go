package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/sandbox/microvm"
	"github.com/paddockhq/paddock/internal/wire"
)

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, filepath.Join(dir, "good.yaml"), "data_dir: "+dir+"\nlimits:\n  memory: 512M\n  timeout: 10m\n  cpus: 1.5\n")
	cfg, err := LoadConfig(good)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Limits.Memory != 512<<20 || cfg.Limits.Timeout != 10*time.Minute || cfg.Limits.CPUs != 1.5 || cfg.WorkspaceRoot != filepath.Join(dir, "workspaces") || cfg.StateDir != "/run/paddock" {
		t.Fatalf("config %+v", cfg)
	}
	bad := []struct{ name, yaml, want string }{
		{"unknown field", "data_dir: /x\nmemory: 1G\n", "line 2: field memory not found"},
		{"bad size", "limits:\n  memory: lots\n", `"lots" is not a size`},
		{"relative dir", "state_dir: run\n", "state_dir"},
		{"process default", "tier: process\n", "tier: the process tier is insecure"},
		{"unknown tier", "tier: vm\n", "tier"},
		{"root sandbox", "sandbox_uid: 0\n", "sandbox_uid"},
		{"bad limits", "max_limits:\n  pids: -3\n", "max_limits.pids"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadConfig(writeFile(t, filepath.Join(t.TempDir(), "c.yaml"), tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
	if _, err := LoadConfig(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Fatal("a missing config file must be an error")
	}
}

func testRunner(t *testing.T) *Runner {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.DataDir, cfg.StateDir = filepath.Join(dir, "data"), filepath.Join(dir, "state")
	cfg, err := LoadConfigFrom(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func TestUserConfigAndTier(t *testing.T) {
	r := testRunner(t)
	writeFile(t, filepath.Join(r.cfg.UsersDir, "ann.yaml"), "limits:\n  memory: 256M\n")
	writeFile(t, filepath.Join(r.cfg.UsersDir, "bob.yaml"), "tier: process\n")
	writeFile(t, filepath.Join(r.cfg.UsersDir, "cy.yaml"), "limits:\n  colour: red\n")
	uc, err := r.cfg.LoadUser("ann")
	if err != nil || uc.Limits.Memory != 256<<20 {
		t.Fatalf("ann: %+v %v", uc, err)
	}
	if l, _ := r.limits(wire.Limits{}, uc); l.Memory != 256<<20 || l.Pids != 1024 {
		t.Fatalf("user limits over defaults: %+v", l)
	}
	if _, err := r.cfg.LoadUser("bob"); err == nil || !strings.Contains(err.Error(), "bob.yaml") {
		t.Fatalf("bob's process default must be refused naming the file: %v", err)
	}
	if _, err := r.cfg.LoadUser("cy"); err == nil || !strings.Contains(err.Error(), "colour") {
		t.Fatalf("unknown user field: %v", err)
	}
	if _, err := r.cfg.LoadUser("../etc"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("path-like user name: %v", err)
	}
	// The microvm tier resolves where QEMU and the guest kernel are installed, and says
	// what to install where they are not.
	microvmTier, microvmErr := wire.TierMicroVM, error(nil)
	if _, err := microvm.Locate(filepath.Join(InstallPrefix, "guest")); err != nil {
		microvmTier, microvmErr = "", errdefs.ErrUnavailable
	}
	tiers := []struct {
		spec Spec
		want wire.Tier
		err  error
	}{
		{Spec{}, wire.TierContainer, nil},
		{Spec{Insecure: true}, wire.TierProcess, nil},
		{Spec{Tier: wire.TierProcess, Insecure: true}, wire.TierProcess, nil},
		{Spec{Tier: wire.TierProcess}, "", errdefs.ErrPermissionDenied},
		{Spec{Tier: wire.TierContainer, Insecure: true}, "", errdefs.ErrInvalidArgument},
		{Spec{Tier: wire.TierMicroVM}, microvmTier, microvmErr},
		{Spec{Tier: "vm"}, "", errdefs.ErrInvalidArgument},
	}
	for _, tt := range tiers {
		got, err := r.resolveTier(tt.spec, UserConfig{})
		if got != tt.want || !errors.Is(err, tt.err) {
			t.Errorf("resolveTier(%+v) = %q, %v; want %q, %v", tt.spec, got, err, tt.want, tt.err)
		}
	}
}

func TestProvisionAndWorkspaceChecks(t *testing.T) {
	r := testRunner(t)
	dir, err := r.ProvisionUser("ann")
	if err != nil {
		t.Fatal(err)
	}
	for sub, mode := range map[string]os.FileMode{"shared": 0o755, "tmp": 0o711, "history": 0o700, "vault": 0o700} {
		fi, err := os.Stat(filepath.Join(dir, sub))
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v %v, want mode %o", sub, fi.Mode(), err, mode)
		}
	}
	proj := t.TempDir()
	if got, err := r.checkWorkspace(proj); err != nil || got != proj {
		t.Fatalf("project dir refused: %v", err)
	}
	for _, ws := range []string{"/", "/etc", "/tmp", "/nonexistent", r.cfg.DataDir, filepath.Dir(r.cfg.DataDir), dir, r.cfg.StateDir} {
		_ = os.MkdirAll(r.cfg.StateDir, 0o700)
		if _, err := r.checkWorkspace(ws); err == nil {
			t.Errorf("workspace %s accepted", ws)
		}
	}
	link := filepath.Join(proj, "link")
	if err := os.Symlink(r.cfg.DataDir, link); err != nil {
		t.Fatal(err)
	}
	if _, err := r.checkWorkspace(link); err == nil {
		t.Error("a symlink to the data dir was accepted as a workspace")
	}
}

func TestPatchedRunc(t *testing.T) {
	tests := []struct {
		out string
		ok  bool
	}{
		{"runc version 1.5.2\ncommit: v1.5.2\n", true}, {"runc version 1.4.0\n", true}, {"runc version 1.3.3\n", true},
		{"runc version 1.2.8\n", true}, {"runc version 1.1.5+ds1\n", false}, {"runc version 1.3.2\n", false},
		{"runc version 1.2.7\n", false}, {"garbage", false},
	}
	for _, tt := range tests {
		if err := patchedRunc(tt.out); (err == nil) != tt.ok {
			t.Errorf("patchedRunc(%q) = %v, want ok=%v", tt.out, err, tt.ok)
		}
	}
}

// A sandbox's history store is beside its workspace, never inside, root's and private; a
// persistent sandbox's is kept (with its content) across Destroy until RemoveWorkspace;
// one-shot sandboxes and tiers without history get none.
func TestHistoryStoreProvisioning(t *testing.T) {
	r := testRunner(t)
	newSandbox := func(spec Spec, tier wire.Tier) *Sandbox {
		t.Helper()
		sb := &Sandbox{ID: spec.ID, Tier: tier}
		if err := r.provision(spec, sb); err != nil {
			t.Fatal(err)
		}
		sb.backend = nopBackend{}
		return sb
	}
	const id = "sb-aaaaaaaaaa"
	sb := newSandbox(Spec{ID: id, User: "ann", Persistent: true}, wire.TierContainer)
	want := filepath.Join(r.cfg.WorkspaceRoot, "ann", "history", id)
	if sb.History != want || within(sb.History, sb.Workspace) {
		t.Fatalf("history at %q (workspace %q), want %q", sb.History, sb.Workspace, want)
	}
	fi, err := os.Stat(sb.History)
	if err != nil || fi.Mode().Perm() != 0o700 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Fatalf("history dir: %v %v, want root's 0700", fi.Mode(), err)
	}
	if err := os.WriteFile(filepath.Join(sb.History, "index.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	again := newSandbox(Spec{ID: id, User: "ann", Persistent: true}, wire.TierContainer)
	if _, err := os.Stat(filepath.Join(again.History, "index.json")); err != nil {
		t.Fatalf("a persistent sandbox's history did not survive a stop: %v", err)
	}
	if err := r.RemoveWorkspace("ann", id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(again.History); !os.IsNotExist(err) {
		t.Fatalf("RemoveWorkspace left the history: %v", err)
	}

	if tmp := newSandbox(Spec{ID: "sb-bbbbbbbbbb", User: "ann"}, wire.TierContainer); tmp.History != "" {
		t.Fatalf("a one-shot sandbox got a history store %s", tmp.History)
	}
	for i, tier := range []wire.Tier{wire.TierProcess, wire.TierMicroVM} {
		if sb := newSandbox(Spec{ID: "sb-cccccccc" + string(rune('a'+i)) + "a", User: "ann"}, tier); sb.History != "" {
			t.Errorf("%s tier got a history store %s", tier, sb.History)
		}
	}
}

// nopBackend stands for a sandbox whose processes are gone.
type nopBackend struct{}

func (nopBackend) Conn() *grpc.ClientConn            { return nil }
func (nopBackend) OOMKills() (uint64, error)         { return 0, nil }
func (nopBackend) Cgroup() string                    { return "" }
func (nopBackend) LastError() string                 { return "" }
func (nopBackend) Destroy(ctx context.Context) error { return nil }

// TestTmpWithinMemory: a /tmp tmpfs must be below the memory limit its pages count against
// (a 1GiB /tmp in a 512MiB sandbox let a full /tmp kill the agent); without a size of its
// own, /tmp takes no memory to ask for.
func TestTmpWithinMemory(t *testing.T) {
	r := New(Config{Limits: wire.Limits{Memory: 512 << 20}}, slog.New(slog.DiscardHandler))
	_, err := r.limits(wire.Limits{Tmp: 1 << 30}, UserConfig{})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "tmp: 1GiB is not below the memory limit (512MiB)") {
		t.Errorf("a 1GiB /tmp in a 512MiB sandbox: %v, want refused naming tmp and memory", err)
	}
	for _, l := range []wire.Limits{{Tmp: 128 << 20}, {}, {Tmp: 1 << 30, Memory: 2 << 30}} {
		if _, err := r.limits(l, UserConfig{}); err != nil {
			t.Errorf("limits %+v: %v", l, err)
		}
	}
}

// A sandbox cannot ask for more CPUs than the host has: such a quota would limit nothing.
func TestCPUsWithinHost(t *testing.T) {
	r := New(Config{}, slog.New(slog.DiscardHandler))
	n := runtime.NumCPU()
	_, err := r.limits(wire.Limits{CPUs: 1000}, UserConfig{})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), fmt.Sprintf("cpus: 1000 is more than this host's %d CPUs", n)) {
		t.Errorf("cpus 1000: %v, want refused naming cpus and the host's CPUs", err)
	}
	if _, err := r.limits(wire.Limits{CPUs: float64(n)}, UserConfig{}); err != nil {
		t.Errorf("cpus %d (all of the host's): %v", n, err)
	}
}

// The default tier is container unless the configuration names one, and the reason given
// says microvm is opt-in, so the log at start and the docs agree with what is chosen.
func TestDefaultTierReason(t *testing.T) {
	r := New(Config{}, nil)
	tier, why := r.DefaultTierReason()
	if got, err := r.resolveTier(Spec{}, UserConfig{}); err != nil || got != tier || tier != wire.TierContainer {
		t.Fatalf("default tier %q (%v), reason names %q; want container both", got, err, tier)
	}
	if !strings.Contains(why, "opt-in") {
		t.Errorf("reason %q does not say microvm is opt-in", why)
	}
	r = New(Config{Tier: wire.TierContainer}, nil)
	if tier, why := r.DefaultTierReason(); tier != wire.TierContainer || !strings.Contains(why, "configuration") {
		t.Errorf("configured tier: %q, %q", tier, why)
	}
}

func TestClusterConfig(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := fmt.Sprintf("data_dir: %s\nrunner:\n  backend: kubernetes\n  kubeconfig: %s\n  namespace: team-a\n  image: paddock/agent:1\n  runtime_classes: {runsc: gvisor}\n  ready_timeout: 90s\n  cert_lifetime: 2h\n  pod_firewall: true\n", dir, kc)
	cfg, err := LoadConfig(writeConfig(t, good))
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Cluster
	if !cfg.OnCluster() || c.Namespace != "team-a" || c.RuntimeClasses["runsc"] != "gvisor" || c.ReadyTimeout != 90*time.Second ||
		c.CertLifetime != 2*time.Hour || !c.PodFirewall || c.CADir != filepath.Join(dir, "kube-ca") || c.ImagePullPolicy != "IfNotPresent" {
		t.Fatalf("cluster configuration %+v", c)
	}
	bad := []struct{ yaml, field string }{
		{"runner: {backend: nomad}\n", "runner.backend"},
		{"runner: {backend: kubernetes, kubeconfig: " + kc + "}\n", "runner.image"},
		{"runner: {backend: kubernetes, image: x, kubeconfig: " + kc + ", namespace: Bad_NS}\n", "runner.namespace"},
		{"runner: {backend: kubernetes, image: x, kubeconfig: /nonexistent}\n", "runner.kubeconfig"},
		{"runner: {backend: kubernetes, image: x, kubeconfig: " + kc + ", cert_lifetime: 30s}\n", "runner.cert_lifetime"},
	}
	for _, tt := range bad {
		_, err := LoadConfig(writeConfig(t, fmt.Sprintf("data_dir: %s\n", dir)+tt.yaml))
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%q: %v, want an error naming %s", tt.yaml, err, tt.field)
		}
	}
	if cfg, err := LoadConfig(writeConfig(t, fmt.Sprintf("data_dir: %s\n", dir))); err != nil || cfg.OnCluster() {
		t.Fatalf("the default is this host: %v %v", cfg.OnCluster(), err)
	}
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "paddock.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
