package runner

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/sandbox/microvm"
	"github.com/paddockhq/paddock/internal/wire"
)

// InstallPrefix is where scripts/setup.sh installs the binaries paddock depends on.
const InstallPrefix = "/usr/local/lib/paddock"

// findBinary returns configured, or the first of InstallPrefix/bin/name and PATH.
func findBinary(configured, name string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	if p := filepath.Join(InstallPrefix, "bin", name); isExecutable(p) {
		return p, nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s is not installed (run scripts/setup.sh, or set %s: in the config): %w", name, name, errdefs.ErrUnavailable)
	}
	return p, nil
}

// findAgent returns the paddock-agent binary: configured, next to this executable, or on PATH.
func findAgent(configured string) (string, error) {
	if configured != "" {
		if !isExecutable(configured) {
			return "", fmt.Errorf("agent %s is not an executable file: %w", configured, errdefs.ErrUnavailable)
		}
		return configured, nil
	}
	if self, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(self), "paddock-agent"); isExecutable(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath("paddock-agent"); err == nil {
		return filepath.Abs(p)
	}
	return "", fmt.Errorf("paddock-agent not found next to paddock or on PATH (build it with make build): %w", errdefs.ErrUnavailable)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

var runcVersion = regexp.MustCompile(`(?m)^runc version (\d+)\.(\d+)\.(\d+)`)

// checkRunc refuses runc builds without the November 2025 fixes for CVE-2025-31133,
// CVE-2025-52565 and CVE-2025-52881 (fixed in 1.2.8, 1.3.3 and 1.4.0): a sandbox could
// escape through them. The answer is cached in stateDir by binary identity, so the check
// costs one stat per run.
func checkRunc(binary, stateDir string) error {
	fi, err := os.Stat(binary)
	if err != nil {
		return fmt.Errorf("runc %s: %w", binary, errdefs.ErrUnavailable)
	}
	stamp := fmt.Sprintf("%s %d %d\n", binary, fi.Size(), fi.ModTime().UnixNano())
	cache := filepath.Join(stateDir, "runc-checked")
	if got, err := os.ReadFile(cache); err == nil && string(got) == stamp {
		return nil
	}
	out, err := exec.Command(binary, "--version").Output()
	if err != nil {
		return fmt.Errorf("runc %s --version: %v: %w", binary, err, errdefs.ErrUnavailable)
	}
	if err := patchedRunc(string(out)); err != nil {
		return fmt.Errorf("%s: %w", binary, err)
	}
	_ = os.WriteFile(cache, []byte(stamp), 0o600)
	return nil
}

func patchedRunc(versionOutput string) error {
	m := runcVersion.FindStringSubmatch(versionOutput)
	if m == nil {
		return fmt.Errorf("cannot read runc's version from %q: %w", strings.TrimSpace(versionOutput), errdefs.ErrUnavailable)
	}
	v := [3]int{}
	for i := range v {
		v[i], _ = strconv.Atoi(m[i+1])
	}
	fixed := (v[0] == 1 && v[1] == 2 && v[2] >= 8) || (v[0] == 1 && v[1] == 3 && v[2] >= 3) || (v[0] == 1 && v[1] >= 4) || v[0] > 1
	if !fixed {
		return fmt.Errorf("runc %d.%d.%d predates the November 2025 container-escape fixes (need 1.2.8, 1.3.3, 1.4.0 or later; scripts/setup.sh installs one): %w", v[0], v[1], v[2], errdefs.ErrFailedPrecondition)
	}
	return nil
}

// Check reports whether the runner can start sandboxes of its default tier: the agent
// binary is found (and static, for the microVM tier), the default OCI runtime is found,
// runc is a patched one, and the state directory is writable; on a cluster, whether its API
// server answers and serves Sandboxes. The control plane's health check calls it.
func (r *Runner) Check() error {
	if r.cfg.OnCluster() {
		return r.Health(context.Background())
	}
	agentBin, err := findAgent(r.cfg.Agent)
	if err != nil {
		return err
	}
	if r.cfg.Tier == wire.TierMicroVM {
		if err := microvm.CheckAgent(agentBin); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(r.cfg.StateDir, 0o711); err != nil {
		return fmt.Errorf("state dir %s: %v: %w", r.cfg.StateDir, err, errdefs.ErrUnavailable)
	}
	if r.cfg.Tier == "" || r.cfg.Tier == wire.TierContainer {
		_, err := r.containerRuntime("")
		return err
	}
	return nil
}
