package kube_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/sandbox/kube"
	"github.com/paddockhq/paddock/internal/sandbox/kubespec"
	"github.com/paddockhq/paddock/internal/wire"
)

// TestWarmPoolConfig: warm_pool.size is read from the runner's block and checked, with an
// error naming the key.
func TestWarmPoolConfig(t *testing.T) {
	var c kube.Config
	if err := yaml.Unmarshal([]byte("image: x\nwarm_pool: {size: 3}\n"), &c); err != nil || c.WarmPool.Size != 3 {
		t.Fatalf("warm_pool.size read as %d (%v)", c.WarmPool.Size, err)
	}
	for _, size := range []int{-1, 1001} {
		c := testConfig()
		c.WarmPool.Size = size
		err := c.Validate()
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "runner.warm_pool.size") {
			t.Errorf("size %d: %v, want an error naming runner.warm_pool.size", size, err)
		}
	}
	for _, size := range []int{0, 5} {
		c := testConfig()
		c.WarmPool.Size = size
		if err := c.Validate(); err != nil {
			t.Errorf("size %d: %v", size, err)
		}
	}
}

// TestPoolTemplate: the pool's pods are paddock's pod with an agent that waits for a
// claim, mounting the CA's certificate and a token for paddock's audience bound to the
// pod, and no sandbox's Secret or label: no pool pod can hold any sandbox's key before
// its claim.
func TestPoolTemplate(t *testing.T) {
	tmpl, err := kube.PoolTemplate(testConfig(), wire.Limits{Memory: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.Spec.NetworkPolicyManagement != "Unmanaged" {
		t.Errorf("networkPolicyManagement %q: paddock ships its own", tmpl.Spec.NetworkPolicyManagement)
	}
	pt := tmpl.Spec.PodTemplate
	if _, ok := pt.ObjectMeta.Labels[kube.LabelSandbox]; ok {
		t.Errorf("a pool pod carries a sandbox label: %v", pt.ObjectMeta.Labels)
	}
	if pt.ObjectMeta.Labels[kube.LabelManagedBy] != kube.ManagedBy {
		t.Errorf("labels %v: the NetworkPolicy selects paddock's pods by %s", pt.ObjectMeta.Labels, kube.LabelManagedBy)
	}
	ctr := pt.Spec.Containers[0]
	if strings.Join(ctr.Command, " ") != wire.AgentPath+" "+wire.PodWarmFlag+" "+wire.PodDir {
		t.Errorf("command %v", ctr.Command)
	}
	if *pt.Spec.AutomountServiceAccountToken {
		t.Error("the API token is mounted")
	}
	var token, ca bool
	for _, v := range pt.Spec.Volumes {
		if v.Secret != nil {
			t.Errorf("volume %s mounts Secret %s", v.Name, v.Secret.SecretName)
		}
		if v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			if s.ServiceAccountToken != nil {
				token = s.ServiceAccountToken.Audience == wire.PodTokenAudience && s.ServiceAccountToken.Path == wire.PodTokenFile
			}
			if s.Secret != nil {
				ca = len(s.Secret.Items) == 0 && strings.HasSuffix(s.Secret.Name, "-ca")
			}
		}
	}
	if !token || !ca {
		t.Errorf("the pod's token for %s (%v) and the CA's Secret (%v) are not both mounted", wire.PodTokenAudience, token, ca)
	}
	if len(tmpl.Spec.VolumeClaimTemplates) != 1 {
		t.Errorf("%d volume claim templates, want the workspace's", len(tmpl.Spec.VolumeClaimTemplates))
	}
}

// TestWarmPoolKeys: warm_pool.pools are read and keyed by runtime and limits, a left-out
// limit being the default; each key names its own pool (a DNS label); two pools of one
// key are refused, naming the second and the first.
func TestWarmPoolKeys(t *testing.T) {
	var w kube.WarmPool
	if err := yaml.Unmarshal([]byte("{size: 1, pools: [{memory: 256MiB, size: 2}, {runtime: runsc, cpus: 1.5, disk: 1GiB, size: 1}]}"), &w); err != nil {
		t.Fatal(err)
	}
	defaults := wire.Limits{Memory: 512 << 20, CPUs: 1, Pids: 256}
	keys, err := w.PoolKeys(defaults)
	if err != nil || len(keys) != 3 {
		t.Fatalf("keys %+v, %v", keys, err)
	}
	want := []kubespec.PoolKey{
		{Runtime: "runc", Limits: wire.Limits{Memory: 512 << 20, CPUs: 1}},
		{Runtime: "runc", Limits: wire.Limits{Memory: 256 << 20, CPUs: 1}},
		{Runtime: "runsc", Limits: wire.Limits{Memory: 512 << 20, CPUs: 1.5, Disk: 1 << 30}},
	}
	names := map[string]bool{}
	for i, k := range keys {
		if k != want[i] {
			t.Errorf("key %d: %+v, want %+v", i, k, want[i])
		}
		name := kube.WarmPoolName(k)
		if len(name) > 63 || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" || names[name] {
			t.Errorf("pool name %q: not a DNS label, or another key's", name)
		}
		names[name] = true
	}
	if w.PoolSize(keys[1], defaults) != 2 || w.PoolSize(keys[0], defaults) != 1 || w.PoolSize(kubespec.KeyOf("microvm", defaults), defaults) != 0 {
		t.Errorf("pool sizes by key are wrong")
	}
	// The default's limits written out are the default pool's key.
	w.Pools = append(w.Pools, kubespec.PoolSpec{Runtime: "runc", Memory: 512 << 20, Size: 3})
	if _, err := w.PoolKeys(defaults); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "warm_pool.pools[2]") || !strings.Contains(err.Error(), "warm_pool.size already") {
		t.Errorf("a pool of the default key: %v", err)
	}
}

// TestWarmPoolKeyIsThePod: a pool's key is what shapes its pods: the runtime, memory,
// CPUs, disk and tmp. The limits a claim hands over in the envelope (pids, file size,
// timeout) do not split pools; a tmp does, and a pool of that tmp is its own.
func TestWarmPoolKeyIsThePod(t *testing.T) {
	defaults := wire.Limits{Memory: 512 << 20, CPUs: 1, Pids: 256, FileSize: 1 << 30}
	base := kubespec.KeyOf("", defaults)
	envelopeOnly := defaults
	envelopeOnly.Pids, envelopeOnly.FileSize, envelopeOnly.Timeout = 64, 1<<20, time.Minute
	if kubespec.KeyOf("runc", envelopeOnly) != base {
		t.Errorf("pids, file size and timeout split the key: %+v against %+v", kubespec.KeyOf("runc", envelopeOnly), base)
	}
	for _, l := range []wire.Limits{{Memory: 1 << 30}, {CPUs: 2}, {Disk: 1 << 30}, {Tmp: 64 << 20}} {
		if kubespec.KeyOf("", l.Or(defaults)) == base {
			t.Errorf("limits %+v: the default pool's key, but the pod differs", l)
		}
	}
	var w kube.WarmPool
	if err := yaml.Unmarshal([]byte("{size: 1, pools: [{tmp: 64MiB, size: 1}]}"), &w); err != nil {
		t.Fatal(err)
	}
	keys, err := w.PoolKeys(defaults)
	if err != nil || len(keys) != 2 || keys[1] != kubespec.KeyOf("", wire.Limits{Tmp: 64 << 20}.Or(defaults)) {
		t.Fatalf("keys %+v, %v: want the default and one of tmp 64MiB", keys, err)
	}
	if kube.WarmPoolName(keys[1]) == kube.WarmPoolName(kubespec.KeyOf("", defaults)) {
		t.Error("a pool of another tmp has the default limits' name")
	}
}

// TestPoolTemplateFirewallsTheSandboxUser: with pod_firewall, a pool pod's firewall names
// the sandbox user, as a cold pod's does, not root (the agent, which it would cut off).
func TestPoolTemplateFirewallsTheSandboxUser(t *testing.T) {
	cfg := testConfig()
	cfg.PodFirewall, cfg.SandboxUID = true, 1000
	tmpl, err := kube.PoolTemplate(cfg, wire.Limits{Memory: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	inits := tmpl.Spec.PodTemplate.Spec.InitContainers
	if len(inits) != 1 || !strings.Contains(strings.Join(inits[0].Command, " "), "--uid-owner 1000 ") {
		t.Fatalf("the pool pod's firewall: %+v, want it to reject uid 1000's packets", inits)
	}
}
