package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// NetworkPolicy enforcement: kube-router's firewall alone (no routing, no service proxy)
// beside the bridge plugin. It programs the host's iptables and ipsets, which every
// cluster on this machine shares, so one cluster at a time runs it (a host-wide lock held
// from start to stop), and what a killed one left is removed before the next starts.

// kubeRouterChainPrefixes name the filter chains kube-router's firewall makes.
var kubeRouterChainPrefixes = []string{"KUBE-ROUTER-", "KUBE-POD-FW-", "KUBE-NWPLCY-"}

// kubeRouterSetPrefixes name the ipsets it makes.
var kubeRouterSetPrefixes = []string{"KUBE-SRC-", "KUBE-DST-", "inet6:KUBE-SRC-", "inet6:KUBE-DST-"}

const (
	enforcerLock = hostStateDir + "/networkpolicy.lock"
	bridgeNF     = "/proc/sys/net/bridge/bridge-nf-call-iptables"
)

// NetworkPolicyMissing says what a cluster started with Options.NetworkPolicy needs that
// this machine lacks (empty when nothing is): setup's kube-router, Debian's iptables and
// ipset, bridged traffic seen by iptables.
func NetworkPolicyMissing() string {
	var missing []string
	if _, err := os.Stat(kubeRouterBinary()); err != nil {
		missing = append(missing, kubeRouterBinary()+" (scripts/setup.sh builds it)")
	}
	for _, b := range []string{"iptables", "iptables-save", "iptables-restore", "ipset"} {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b+" (Debian's iptables and ipset; scripts/setup.sh installs them)")
		}
	}
	if _, err := os.Stat(bridgeNF); err != nil {
		missing = append(missing, "the br_netfilter module (bridged pod-to-pod traffic would bypass iptables)")
	}
	return strings.Join(missing, "; ")
}

func kubeRouterBinary() string { return filepath.Join(Prefix(), "kuberouter", "kube-router") }

// startEnforcer takes the host-wide enforcer lock, removes what an earlier run left, turns
// on bridge-nf-call-iptables, and starts kube-router's firewall; it returns when its
// top-level chains exist.
func (c *Cluster) startEnforcer(ctx context.Context, opts Options) error {
	if m := NetworkPolicyMissing(); m != "" {
		return fmt.Errorf("NetworkPolicy enforcer: missing %s", m)
	}
	lock, err := os.OpenFile(enforcerLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		lock.Close()
		return fmt.Errorf("lock %s: %w", enforcerLock, err)
	}
	c.enforcerLock = lock
	cleanKubeRouter()
	was, err := os.ReadFile(bridgeNF)
	if err != nil {
		return fmt.Errorf("bridge-nf-call-iptables: %w", err)
	}
	if v := strings.TrimSpace(string(was)); v != "1" {
		if err := os.WriteFile(bridgeNF, []byte("1"), 0o644); err != nil {
			return fmt.Errorf("bridge-nf-call-iptables: %w", err)
		}
		c.bridgeNFWas = v
	}
	kr, err := c.run(opts, "kube-router", kubeRouterBinary(), []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
		"--kubeconfig="+c.Kubeconfig, "--hostname-override="+NodeName,
		"--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
		"--enable-cni=false", "--enable-ipv6=false",
		"--service-cluster-ip-range=10.235.0.0/24",
		"--health-port=0", "--metrics-port=0")
	if err != nil {
		return err
	}
	return waitFor(ctx, "kube-router to make its chains", 2*time.Minute, kr, func() error {
		_, err := iptables("-S", "KUBE-ROUTER-FORWARD")
		return err
	})
}

// stopEnforcer removes kube-router's chains and ipsets (after kube-router stopped), puts
// bridge-nf-call-iptables back, and releases the lock.
func (c *Cluster) stopEnforcer() {
	if c.enforcerLock == nil {
		return
	}
	cleanKubeRouter()
	if c.bridgeNFWas != "" {
		_ = os.WriteFile(bridgeNF, []byte(c.bridgeNFWas), 0o644)
	}
	_ = unix.Flock(int(c.enforcerLock.Fd()), unix.LOCK_UN)
	c.enforcerLock.Close()
	c.enforcerLock = nil
}

// cleanKubeRouter deletes kube-router's jumps from the built-in chains, then its chains,
// then its ipsets. Only the enforcer lock's holder calls it.
func cleanKubeRouter() {
	rules, err := iptables("-S")
	if err != nil {
		return
	}
	var chains []string
	for _, line := range strings.Split(rules, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "-N" && hasAnyPrefix(f[1], kubeRouterChainPrefixes):
			chains = append(chains, f[1])
		case len(f) > 2 && f[0] == "-A" && !hasAnyPrefix(f[1], kubeRouterChainPrefixes) && jumpsToKubeRouter(f):
			_, _ = iptables(append([]string{"-D"}, unquote(f[1:])...)...)
		}
	}
	for _, ch := range chains {
		_, _ = iptables("-F", ch)
	}
	for _, ch := range chains {
		_, _ = iptables("-X", ch)
	}
	out, err := exec.Command("ipset", "list", "-n").Output()
	if err != nil {
		return
	}
	for _, set := range strings.Fields(string(out)) {
		if hasAnyPrefix(set, kubeRouterSetPrefixes) {
			_ = exec.Command("ipset", "destroy", set).Run()
		}
	}
}

func jumpsToKubeRouter(f []string) bool {
	for i := range f[:len(f)-1] {
		if f[i] == "-j" && hasAnyPrefix(f[i+1], kubeRouterChainPrefixes) {
			return true
		}
	}
	return false
}

// unquote drops the quotes iptables -S puts around a comment: exec passes each field as
// it is, so a quoted comment would not match the rule's.
func unquote(f []string) []string {
	var out []string
	for i := 0; i < len(f); i++ {
		if !strings.HasPrefix(f[i], `"`) {
			out = append(out, f[i])
			continue
		}
		s := f[i]
		for !strings.HasSuffix(s, `"`) || s == `"` {
			i++
			if i == len(f) {
				break
			}
			s += " " + f[i]
		}
		out = append(out, strings.Trim(s, `"`))
	}
	return out
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func iptables(args ...string) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.Command("iptables", append([]string{"-w", "-t", "filter"}, args...)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// PodFirewall returns the rules kube-router's firewall applies to a pod (its chain's), or
// an error when it has none yet. A test waits on it before it probes: the enforcer
// programs a pod once it has seen the pod's address, not before the pod's first packet.
func (c *Cluster) PodFirewall(namespace, name string) (string, error) {
	if c.enforcerLock == nil {
		return "", errors.New("this cluster enforces no NetworkPolicy (Options.NetworkPolicy)")
	}
	fwd, err := iptables("-S", "KUBE-ROUTER-FORWARD")
	if err != nil {
		return "", err
	}
	marker := "POD name:" + name + " namespace: " + namespace + " to chain "
	for _, line := range strings.Split(fwd, "\n") {
		if i := strings.Index(line, marker); i >= 0 {
			chain := strings.Fields(line[i+len(marker):])[0]
			return iptables("-S", strings.Trim(chain, `"`))
		}
	}
	return "", fmt.Errorf("no firewall chain for pod %s/%s yet", namespace, name)
}
