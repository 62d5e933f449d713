package kube_test

import (
	"errors"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/sandbox/kube"
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
