package kube_test

import (
	"bytes"
	"errors"
	"maps"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/sandbox/kube"
	"github.com/paddockhq/paddock/internal/sandbox/kubespec"
	"github.com/paddockhq/paddock/internal/wire"
	"github.com/paddockhq/paddock/internal/wire/podtls"
)

func testConfig() *kube.Config {
	c := &kube.Config{Image: "paddock/agent:test", RuntimeClasses: map[string]string{"runsc": "gvisor"}}
	c.Fill("/var/lib/paddock")
	return c
}

func TestRuntimeClass(t *testing.T) {
	tests := []struct {
		runtime string
		want    string // "" for the cluster's default
		err     error
	}{
		{"", "", nil},
		{"runc", "", nil},
		{"runsc", "gvisor", nil},
		{"microvm", "", errdefs.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.runtime, func(t *testing.T) {
			sb, err := kube.NewSandbox(testConfig(), kube.Request{ID: "sb-aaaaaaaaaa", Runtime: tt.runtime, UID: 1000, GID: 1000})
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := sb.Spec.PodTemplate.Spec.RuntimeClassName
			if (tt.want == "") != (got == nil) || (got != nil && *got != tt.want) {
				t.Fatalf("runtimeClassName %v, want %q", got, tt.want)
			}
		})
	}
}

func TestLimitsBecomeResources(t *testing.T) {
	l := wire.Limits{Memory: 64 << 20, CPUs: 0.25, Disk: 2 << 30, Tmp: 16 << 20, Pids: 32, FileSize: 1 << 20}
	sb, err := kube.NewSandbox(testConfig(), kube.Request{ID: "sb-aaaaaaaaaa", Limits: l, UID: 1000, GID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ctr := sb.Spec.PodTemplate.Spec.Containers[0]
	for _, rl := range []corev1.ResourceList{ctr.Resources.Limits, ctr.Resources.Requests} {
		if m := rl[corev1.ResourceMemory]; m.Value() != 64<<20 {
			t.Errorf("memory %s, want 64Mi", m.String())
		}
		if c := rl[corev1.ResourceCPU]; c.MilliValue() != 250 {
			t.Errorf("cpu %s, want 250m", c.String())
		}
	}
	vct := sb.Spec.VolumeClaimTemplates
	if len(vct) != 1 || !vct[0].Spec.Resources.Requests[corev1.ResourceStorage].Equal(resource.MustParse("2Gi")) {
		t.Fatalf("workspace volume %+v, want one of 2Gi", vct)
	}
	var tmp *corev1.EmptyDirVolumeSource
	for _, v := range sb.Spec.PodTemplate.Spec.Volumes {
		if v.EmptyDir != nil {
			tmp = v.EmptyDir
		}
	}
	if tmp == nil || tmp.Medium != corev1.StorageMediumMemory || tmp.SizeLimit.Value() != 16<<20 {
		t.Fatalf("/tmp %+v, want 16Mi in memory", tmp)
	}
	env := kube.Envelope(kube.Request{ID: "sb-aaaaaaaaaa", Limits: l, UID: 1000, GID: 1000})
	if env.CommandNproc != 32 || env.FileSizeLimit != 1<<20 {
		t.Fatalf("envelope limits: nproc %d file size %d", env.CommandNproc, env.FileSizeLimit)
	}
}

func TestNoLimitsNoResources(t *testing.T) {
	sb, err := kube.NewSandbox(testConfig(), kube.Request{ID: "sb-aaaaaaaaaa", UID: 1000, GID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if r := sb.Spec.PodTemplate.Spec.Containers[0].Resources; len(r.Limits)+len(r.Requests) != 0 {
		t.Fatalf("resources %+v without limits", r)
	}
	if got := sb.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage]; got.Value() != 4<<30 {
		t.Fatalf("workspace %s, want the configured 4Gi", got.String())
	}
}

// TestWorkspaceVolume: an ephemeral sandbox's workspace is an emptyDir of its disk size in
// its pod, with no volume claim; any other's is the claim the controller mounts.
func TestWorkspaceVolume(t *testing.T) {
	for _, tt := range []struct {
		name      string
		ephemeral bool
	}{{"claim", false}, {"ephemeral", true}} {
		t.Run(tt.name, func(t *testing.T) {
			req := kube.Request{ID: "sb-aaaaaaaaaa", UID: 1000, GID: 1000, Limits: wire.Limits{Disk: 256 << 20}, Ephemeral: tt.ephemeral}
			sb, err := kube.NewSandbox(testConfig(), req)
			if err != nil {
				t.Fatal(err)
			}
			var dir *corev1.EmptyDirVolumeSource
			for _, v := range sb.Spec.PodTemplate.Spec.Volumes {
				if v.Name == "workspace" {
					dir = v.EmptyDir
				}
			}
			if !tt.ephemeral {
				if len(sb.Spec.VolumeClaimTemplates) != 1 || dir != nil {
					t.Fatalf("claims %d, emptyDir %v: want the claim alone", len(sb.Spec.VolumeClaimTemplates), dir)
				}
				return
			}
			if len(sb.Spec.VolumeClaimTemplates) != 0 {
				t.Fatalf("an ephemeral workspace with %d volume claims", len(sb.Spec.VolumeClaimTemplates))
			}
			if dir == nil || dir.SizeLimit == nil || dir.SizeLimit.Value() != 256<<20 {
				t.Fatalf("workspace emptyDir %+v, want 256Mi", dir)
			}
		})
	}
}

// TestPodIsLockedDown: the pod runs with what the agent needs and nothing else.
func TestPodIsLockedDown(t *testing.T) {
	c := testConfig()
	sb, err := kube.NewSandbox(c, kube.Request{ID: "sb-aaaaaaaaaa", UID: 1000, GID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ps := sb.Spec.PodTemplate.Spec
	if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
		t.Error("the service account token is mounted")
	}
	if ps.HostNetwork || ps.HostPID || ps.HostIPC {
		t.Error("the pod shares a host namespace")
	}
	if len(ps.Containers) != 1 || len(ps.InitContainers) != 0 {
		t.Fatalf("containers %d, init %d: want the agent alone", len(ps.Containers), len(ps.InitContainers))
	}
	sc := ps.Containers[0].SecurityContext
	switch {
	case sc == nil:
		t.Fatal("no security context")
	case sc.Privileged == nil || *sc.Privileged:
		t.Error("privileged")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("privilege escalation allowed")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("writable root")
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Error("no RuntimeDefault seccomp")
	case sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL":
		t.Error("capabilities not all dropped first")
	}
	// Pod Security Standards, baseline: added capabilities stay within its list.
	baseline := map[corev1.Capability]bool{"AUDIT_WRITE": true, "CHOWN": true, "DAC_OVERRIDE": true, "FOWNER": true, "FSETID": true, "KILL": true,
		"MKNOD": true, "NET_BIND_SERVICE": true, "SETFCAP": true, "SETGID": true, "SETPCAP": true, "SETUID": true, "SYS_CHROOT": true}
	for _, c := range sc.Capabilities.Add {
		if !baseline[c] {
			t.Errorf("capability %s is beyond the baseline", c)
		}
	}
	for _, v := range ps.Volumes {
		if v.HostPath != nil {
			t.Errorf("host path %s without node_usr", v.HostPath.Path)
		}
		if v.Secret != nil && v.Secret.SecretName != kube.SecretName("sb-aaaaaaaaaa") {
			t.Errorf("the pod mounts another Secret: %s", v.Secret.SecretName)
		}
	}
	c.NodeUsr = true
	sb, _ = kube.NewSandbox(c, kube.Request{ID: "sb-aaaaaaaaaa", UID: 1000, GID: 1000})
	for _, m := range sb.Spec.PodTemplate.Spec.Containers[0].VolumeMounts {
		if m.MountPath == "/usr" && !m.ReadOnly {
			t.Error("the node's /usr is writable")
		}
	}
}

func TestSecretCarriesTheEnvelopeAndPair(t *testing.T) {
	ca, err := podtls.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	pair, _ := ca.IssueSandbox("sb-aaaaaaaaaa")
	req := kube.Request{ID: "sb-aaaaaaaaaa", UID: 1000, GID: 1000, Env: []string{"A=b"}, Main: &wire.Command{Argv: []string{"echo", "hi"}}, CapabilityKeys: "keys"}
	s, err := kube.NewSecret(testConfig(), req, pair, ca.CertPEM())
	if err != nil {
		t.Fatal(err)
	}
	env, err := wire.ReadEnvelope(bytes.NewReader(s.Data[wire.EnvelopeFile]))
	if err != nil {
		t.Fatal(err)
	}
	if env.SandboxID != req.ID || env.ListenAddr != ":7443" || env.ListenFD != 0 || env.RunAs.UID != 1000 ||
		env.HistoryDir != wire.HistoryPath || env.Main.Argv[0] != "echo" || env.CapabilityKeys != "keys" {
		t.Fatalf("envelope %+v", env)
	}
	if !bytes.Equal(s.Data[podtls.CertFile], pair.Cert) || !bytes.Equal(s.Data[podtls.KeyFile], pair.Key) || !bytes.Equal(s.Data[podtls.CAFile], ca.CertPEM()) {
		t.Fatal("the Secret does not carry the pair and the CA")
	}
	if s.Namespace != kube.DefaultNamespace || s.Name != kube.SecretName(req.ID) {
		t.Fatalf("Secret %s/%s", s.Namespace, s.Name)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*kube.Config)
		field string
	}{
		{"no image", func(c *kube.Config) { c.Image = "" }, "image"},
		{"bad pull policy", func(c *kube.Config) { c.ImagePullPolicy = "Sometimes" }, "image_pull_policy"},
		{"bad namespace", func(c *kube.Config) { c.Namespace = "Paddock_Sandboxes" }, "namespace"},
		{"unknown runtime", func(c *kube.Config) { c.RuntimeClasses = map[string]string{"docker": "x"} }, "runtime_classes"},
		{"bad class name", func(c *kube.Config) { c.RuntimeClasses = map[string]string{"runsc": "G Visor"} }, "runtime_classes"},
		{"missing kubeconfig", func(c *kube.Config) { c.Kubeconfig = "/nonexistent/kubeconfig" }, "kubeconfig"},
		{"bad toleration operator", func(c *kube.Config) { c.Tolerations = []kube.Toleration{{Key: "k", Operator: "Is"}} }, "tolerations[0]"},
		{"bad toleration effect", func(c *kube.Config) { c.Tolerations = []kube.Toleration{{Key: "k", Effect: "Evict"}} }, "tolerations[0]"},
		{"node lost after less than a second", func(c *kube.Config) { c.NodeLostAfter = 500 * time.Millisecond }, "node_lost_after"},
		{"node lost after a part of a second", func(c *kube.Config) { c.NodeLostAfter = 1500 * time.Millisecond }, "node_lost_after"},
		{"node lost after a negative time", func(c *kube.Config) { c.NodeLostAfter = -time.Second }, "node_lost_after"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testConfig()
			tt.edit(c)
			err := c.Validate()
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !bytes.Contains([]byte(err.Error()), []byte("runner."+tt.field)) {
				t.Fatalf("err %v, want one naming runner.%s", err, tt.field)
			}
		})
	}
	if err := testConfig().Validate(); err != nil {
		t.Fatalf("a good configuration: %v", err)
	}
}

// TestPlacementFromConfig: runner.node_selector and runner.tolerations, as an operator
// writes them in YAML, put the pod on the nodes kept for sandboxes.
func TestPlacementFromConfig(t *testing.T) {
	var c kube.Config
	src := "image: paddock/agent:1\nnode_selector: {pool: sandboxes}\ntolerations:\n  - {key: dedicated, operator: Equal, value: sandboxes, effect: NoSchedule}\n  - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, toleration_seconds: 30}\n"
	if err := yaml.Unmarshal([]byte(src), &c); err != nil {
		t.Fatal(err)
	}
	c.Fill(t.TempDir())
	pt, err := kube.PodTemplate(&c, kube.Request{ID: "sb-aaaaaaaaaa", UID: 1000, GID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	want := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "sandboxes", Effect: corev1.TaintEffectNoSchedule}
	// The operator's two, then paddock's of a not-ready node (theirs of an unreachable
	// one stands).
	if pt.Spec.NodeSelector["pool"] != "sandboxes" || len(pt.Spec.Tolerations) != 3 || pt.Spec.Tolerations[0] != want ||
		pt.Spec.Tolerations[1].TolerationSeconds == nil || *pt.Spec.Tolerations[1].TolerationSeconds != 30 ||
		pt.Spec.Tolerations[2].Key != kubespec.TaintNodeNotReady {
		t.Fatalf("node selector %v, tolerations %+v", pt.Spec.NodeSelector, pt.Spec.Tolerations)
	}
}

// TestLostNodeTolerations: a pod tolerates a node that is not ready or unreachable for
// runner.node_lost_after (30s by default, not Kubernetes' 5m), so that Kubernetes evicts it
// from a lost node in seconds; an operator's own toleration of either taint stands.
func TestLostNodeTolerations(t *testing.T) {
	for _, tt := range []struct {
		name string
		src  string
		want map[string]int64 // key → toleration_seconds, NoExecute
	}{
		{"default", "image: a\n", map[string]int64{kubespec.TaintNodeNotReady: 30, kubespec.TaintNodeUnreachable: 30}},
		{"set", "image: a\nnode_lost_after: 5s\n", map[string]int64{kubespec.TaintNodeNotReady: 5, kubespec.TaintNodeUnreachable: 5}},
		{"the operator's own", "image: a\nnode_lost_after: 5s\ntolerations: [{key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, toleration_seconds: 600}]\n",
			map[string]int64{kubespec.TaintNodeNotReady: 5, kubespec.TaintNodeUnreachable: 600}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var c kube.Config
			if err := yaml.Unmarshal([]byte(tt.src), &c); err != nil {
				t.Fatal(err)
			}
			c.Fill(t.TempDir())
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			pt, err := kube.PodTemplate(&c, kube.Request{ID: "sb-aaaaaaaaaa", UID: 1000, GID: 1000})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int64{}
			for _, tol := range pt.Spec.Tolerations {
				if tol.Effect != corev1.TaintEffectNoExecute || tol.Operator != corev1.TolerationOpExists || tol.TolerationSeconds == nil {
					t.Fatalf("toleration %+v", tol)
				}
				if _, dup := got[tol.Key]; dup {
					t.Fatalf("two tolerations of %s: %+v", tol.Key, pt.Spec.Tolerations)
				}
				got[tol.Key] = *tol.TolerationSeconds
			}
			if !maps.Equal(got, tt.want) {
				t.Fatalf("tolerations %v, want %v", got, tt.want)
			}
		})
	}
}
