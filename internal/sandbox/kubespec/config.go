// Package kubespec is what the runner's Kubernetes backend is configured and asked with:
// the runner's `backend: kubernetes` settings and a sandbox's request, checked at load.
// It links no Kubernetes client, so that a binary that reads the runner's configuration
// (the CLI's `paddock run`) does not link client-go; package kube runs them.
package kubespec

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
	"github.com/paddockhq/paddock/internal/wire/podtls"
)

// Config is the runner's Kubernetes backend (runner: {backend: kubernetes, ...}).
type Config struct {
	// Kubeconfig is the kubeconfig file paddock uses; empty means the in-cluster
	// configuration (paddock running in a pod with a service account).
	Kubeconfig string `yaml:"kubeconfig"`
	// Namespace holds the sandboxes, their Secrets and volumes. Default: paddock-sandboxes.
	Namespace string `yaml:"namespace"`
	// Image is the sandbox pods' image: paddock-agent at /.paddock/paddock-agent and the
	// programs sandboxes run. Required.
	Image string `yaml:"image"`
	// ImagePullPolicy is the pods' (Always, IfNotPresent or Never). Default: IfNotPresent.
	ImagePullPolicy string `yaml:"image_pull_policy"`
	// RuntimeClasses maps a sandbox's runtime to a RuntimeClass: "runc" (the container
	// tier's default; empty or absent is the cluster's default runtime), "runsc" (gVisor),
	// "microvm" (Kata or Firecracker). A runtime with no class here is refused.
	RuntimeClasses map[string]string `yaml:"runtime_classes"`
	// StorageClass is the class of the workspaces' volumes; empty is the cluster's default.
	StorageClass string `yaml:"storage_class"`
	// WorkspaceSize is a workspace volume's size when the sandbox's limits give no disk.
	// Default: 4GiB.
	WorkspaceSize wire.Size `yaml:"workspace_size"`
	// NodeSelector and Tolerations put the pods on the nodes kept for sandboxes (node
	// labels to match; taints to tolerate).
	NodeSelector map[string]string `yaml:"node_selector"`
	Tolerations  []Toleration      `yaml:"tolerations"`
	// NodeLostAfter is how long a pod stays bound to a node that is not ready or
	// unreachable before Kubernetes evicts it: the toleration_seconds of the pods'
	// NoExecute tolerations of node.kubernetes.io/not-ready and unreachable (Kubernetes'
	// own default is 5m). A toleration of either key in Tolerations replaces paddock's.
	// Default: 30s; whole seconds, at least 1s.
	NodeLostAfter time.Duration `yaml:"node_lost_after"`
	// ForceDeleteLostPods lets a start of a sandbox whose pod is held by a lost node (not
	// Ready for longer than NodeLostAfter) force-delete that pod, so that the sandbox
	// starts on another node with its workspace. Off, the start waits until the node
	// returns, is removed, or is tainted node.kubernetes.io/out-of-service (Kubernetes'
	// sign that it is really down, on which paddock deletes the pod anyway). The risk: a
	// node that is only cut off from the API server may still run the old pod, which then
	// writes the workspace's volume beside the new one (a volume that attaches to one node
	// at a time is safe from that). Needs get on nodes (deploy/kubernetes/rbac.yaml).
	ForceDeleteLostPods bool `yaml:"force_delete_lost_pods"`
	// NodeUsr binds each node's /usr read-only at /usr in the pods, as the single-host
	// container tier binds the host's: the node then provides the sandboxes' programs,
	// and the image needs only the agent and /etc. Only for clusters whose nodes are
	// paddock hosts (the test cluster); off, the image brings its own /usr.
	NodeUsr bool `yaml:"node_usr"`
	// PodFirewall adds to each pod an init container that, with NET_ADMIN, rejects in the
	// pod's own network namespace every packet the sandbox user's processes send
	// anywhere but the pod's loopback: the sandbox then reaches nothing but what the agent
	// relays (the host's services, the egress proxy), whatever the cluster's network
	// plugin enforces. The image needs iptables (nf_tables); the init container's
	// NET_ADMIN is outside the Pod Security Standards' baseline.
	PodFirewall bool `yaml:"pod_firewall"`
	// CADir holds the channel's CA (ca.crt, ca.key), made on first use; replicas share
	// one through their database unless these files are given. Default: <data_dir>/kube-ca.
	CADir string `yaml:"ca_dir"`
	// CA, when set, is the channel's CA, loaded by the control plane (replicas share one
	// through their database); CADir is then not read.
	CA *podtls.CA `yaml:"-"`
	// CertLifetime is how long the channel's certificates last, the sandboxes' and the
	// control plane's; each is renewed at half its life while it is in use (a sandbox's
	// by rewriting its Secret, which the kubelet passes on to the running pod). Default:
	// 24h; at least 1m, and better well above twice the kubelet's sync period.
	CertLifetime time.Duration `yaml:"cert_lifetime"`
	// ReadyTimeout bounds how long a start waits for the pod to be ready. Default: 5m
	// (the first pull of an image can be slow).
	ReadyTimeout time.Duration `yaml:"ready_timeout"`
	// WarmPool keeps pods started ahead, of the default runtime and limits and of those
	// its pools name, claimed by new sandboxes of a pool's runtime and limits (pool.go).
	WarmPool WarmPool `yaml:"warm_pool"`

	// SandboxUID is the sandbox user's UID, which a pool's pods are made for (the pod
	// firewall names it); the runner sets it from its own.
	SandboxUID uint32 `yaml:"-"`
	// Replica is the ID of the replica this control plane is (replica.id), empty when it
	// is the only one: it marks the pool objects and members it makes, so that its
	// cleanups at start touch no other replica's. The server sets it.
	Replica string `yaml:"-"`
}

// The image pull policies, as Kubernetes names them.
const (
	PullAlways       = "Always"
	PullIfNotPresent = "IfNotPresent"
	PullNever        = "Never"
)

// MinCertLifetime is the shortest CertLifetime.
const MinCertLifetime = time.Minute

// DefaultNamespace is the sandboxes' namespace when the configuration names none.
const DefaultNamespace = "paddock-sandboxes"

// Fill sets the defaults; dataDir is the runner's.
func (c *Config) Fill(dataDir string) {
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = PullIfNotPresent
	}
	if c.WorkspaceSize == 0 {
		c.WorkspaceSize = 4 << 30
	}
	if c.CADir == "" {
		c.CADir = filepath.Join(dataDir, "kube-ca")
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = 5 * time.Minute
	}
	if c.CertLifetime == 0 {
		c.CertLifetime = podtls.DefaultLifetime
	}
	if c.NodeLostAfter == 0 {
		c.NodeLostAfter = DefaultNodeLostAfter
	}
}

// DefaultNodeLostAfter is NodeLostAfter when the configuration gives none.
const DefaultNodeLostAfter = 30 * time.Second

// The taints the node lifecycle controller puts on a node that is not ready or that stopped
// reporting.
const (
	TaintNodeNotReady    = "node.kubernetes.io/not-ready"
	TaintNodeUnreachable = "node.kubernetes.io/unreachable"
)

// TaintOutOfService is the taint an operator puts on a node that is really down (shut
// down, or fenced): Kubernetes then force-deletes its terminating pods and detaches their
// volumes, and paddock starts its sandboxes on other nodes.
const TaintOutOfService = "node.kubernetes.io/out-of-service"

// PodTolerations are the pods' tolerations: Tolerations, and those of a lost node for
// NodeLostAfter unless Tolerations has its own for that taint.
func (c *Config) PodTolerations() []Toleration {
	out := append([]Toleration{}, c.Tolerations...)
	secs := int64(c.NodeLostAfter / time.Second)
	for _, key := range []string{TaintNodeNotReady, TaintNodeUnreachable} {
		if c.tolerates(key) || secs <= 0 {
			continue
		}
		out = append(out, Toleration{Key: key, Operator: "Exists", Effect: "NoExecute", TolerationSeconds: &secs})
	}
	return out
}

// tolerates says whether Tolerations has one of key (or of every key) for NoExecute.
func (c *Config) tolerates(key string) bool {
	for _, t := range c.Tolerations {
		if (t.Key == key || (t.Key == "" && t.Operator == "Exists")) && (t.Effect == "" || t.Effect == "NoExecute") {
			return true
		}
	}
	return false
}

// Validate names the first field that is wrong.
func (c *Config) Validate() error {
	switch {
	case c.Image == "":
		return invalid("image", "is required: the sandbox pods' image, with paddock-agent at %s", wire.AgentPath)
	case c.ImagePullPolicy != PullAlways && c.ImagePullPolicy != PullIfNotPresent && c.ImagePullPolicy != PullNever:
		return invalid("image_pull_policy", "%q: want Always, IfNotPresent or Never", c.ImagePullPolicy)
	case !dnsLabel(c.Namespace):
		return invalid("namespace", "%q is not a namespace name (a DNS label)", c.Namespace)
	case c.WorkspaceSize < 0:
		return invalid("workspace_size", "must be positive")
	case c.ReadyTimeout < 0:
		return invalid("ready_timeout", "must be positive")
	case c.NodeLostAfter < 0 || (c.NodeLostAfter != 0 && (c.NodeLostAfter < time.Second || c.NodeLostAfter%time.Second != 0)):
		return invalid("node_lost_after", "%s: want whole seconds, at least 1s (a toleration's seconds)", c.NodeLostAfter)
	case c.CertLifetime != 0 && c.CertLifetime < MinCertLifetime:
		return invalid("cert_lifetime", "%s: at least %s (a renewal at half the lifetime must reach the pod through the kubelet)", c.CertLifetime, MinCertLifetime)
	}
	if c.Kubeconfig != "" {
		if _, err := os.Stat(c.Kubeconfig); err != nil {
			return invalid("kubeconfig", "%v", err)
		}
	}
	if err := c.WarmPool.validate(c.RuntimeClasses); err != nil {
		return err
	}
	for i, t := range c.Tolerations {
		if err := t.validate(); err != nil {
			return invalid(fmt.Sprintf("tolerations[%d]", i), "%v", err)
		}
	}
	for rt, class := range c.RuntimeClasses {
		if rt != "runc" && rt != "runsc" && rt != "microvm" {
			return invalid("runtime_classes", "%q: want runc, runsc or microvm", rt)
		}
		if class != "" && !dnsSubdomain(class) {
			return invalid("runtime_classes", "%s: %q is not a RuntimeClass name", rt, class)
		}
	}
	return nil
}

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("runner.%s: %s: %w", field, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
}

// dnsLabel reports whether s is an RFC 1123 label, as namespaces are: a sandbox ID's
// characters and length, not ending with a dash.
func dnsLabel(s string) bool { return wire.ValidSandboxID(s) && !strings.HasSuffix(s, "-") }

// dnsSubdomain reports whether s is an RFC 1123 subdomain, as RuntimeClass names are.
func dnsSubdomain(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			if !dnsLabel(s[start:i]) {
				return false
			}
			start = i + 1
		}
	}
	return true
}

// Toleration is a taint a sandbox's pod tolerates, as Kubernetes' own, with the keys
// written as the rest of paddock's configuration is.
type Toleration struct {
	Key      string `yaml:"key"`
	Operator string `yaml:"operator"` // Equal (the default) or Exists
	Value    string `yaml:"value"`
	Effect   string `yaml:"effect"` // NoSchedule, PreferNoSchedule, NoExecute; empty is all
	// TolerationSeconds is how long a NoExecute taint is tolerated; absent is for ever.
	TolerationSeconds *int64 `yaml:"toleration_seconds"`
}

func (t Toleration) validate() error {
	switch t.Operator {
	case "", "Equal":
	case "Exists":
		if t.Value != "" {
			return fmt.Errorf("operator Exists takes no value (%q)", t.Value)
		}
	default:
		return fmt.Errorf("operator %q: want Equal or Exists", t.Operator)
	}
	switch t.Effect {
	case "", "NoSchedule", "PreferNoSchedule", "NoExecute":
	default:
		return fmt.Errorf("effect %q: want NoSchedule, PreferNoSchedule or NoExecute", t.Effect)
	}
	if t.TolerationSeconds != nil && t.Effect != "NoExecute" {
		return fmt.Errorf("toleration_seconds is for effect NoExecute only")
	}
	return nil
}

// WarmPool is a pool setting (runner: {backend: kubernetes, warm_pool: {size: N}}).
type WarmPool struct {
	// Size is how many pods the pool of the default runtime and limits keeps ready; 0 is
	// no such pool.
	Size int `yaml:"size"`
	// Pools are pools of other runtimes and limits, each a SandboxWarmPool of its own: a
	// new sandbox claims from the one whose runtime and limits are exactly its own.
	Pools []PoolSpec `yaml:"pools"`
}

// PoolSpec is one more warm pool: size pods of a runtime and limits. A limit left out is
// the runner's default, as for a new sandbox.
type PoolSpec struct {
	// Runtime is runc (the default), runsc or microvm: a runtime of runtime_classes.
	Runtime string    `yaml:"runtime"`
	Memory  wire.Size `yaml:"memory"`
	CPUs    float64   `yaml:"cpus"`
	Disk    wire.Size `yaml:"disk"`
	// Tmp sizes the pods' /tmp in memory, as a sandbox's limit of that name does.
	Tmp wire.Size `yaml:"tmp"`
	// Size is how many pods it keeps ready: 1 to MaxPoolSize.
	Size int `yaml:"size"`
}

// PoolKey is what a sandbox must share with a pool's pods to claim one: its runtime and
// the limits that shape the pod (memory, CPUs, disk and tmp). Its other limits (pids,
// file size, timeout) are in the envelope a claim hands the pod, with its environment
// and command, so they do not split pools.
type PoolKey struct {
	Runtime string
	Limits  wire.Limits // Memory, CPUs, Disk and Tmp; the rest zero
}

// KeyOf is the key of a sandbox of runtime rt (empty is runc) and limits.
func KeyOf(rt string, limits wire.Limits) PoolKey {
	if rt == "" {
		rt = "runc"
	}
	return PoolKey{Runtime: rt, Limits: wire.Limits{Memory: limits.Memory, CPUs: limits.CPUs, Disk: limits.Disk, Tmp: limits.Tmp}}
}

// Limits are p's pods' limits, those left out filled from defaults.
func (p PoolSpec) Limits(defaults wire.Limits) wire.Limits {
	return wire.Limits{Memory: p.Memory, CPUs: p.CPUs, Disk: p.Disk, Tmp: p.Tmp}.Or(defaults)
}

// Key is p's key, its limits filled from defaults.
func (p PoolSpec) Key(defaults wire.Limits) PoolKey { return KeyOf(p.Runtime, p.Limits(defaults)) }

// MaxPoolSize bounds a warm pool's size: each member is a running pod and a volume.
const MaxPoolSize = 1000

func (w WarmPool) validate(classes map[string]string) error {
	if w.Size < 0 || w.Size > MaxPoolSize {
		return invalid("warm_pool.size", "%d: want 0 (no pool) to %d", w.Size, MaxPoolSize)
	}
	for i, p := range w.Pools {
		field := fmt.Sprintf("warm_pool.pools[%d]", i)
		rt := p.Runtime
		if rt == "" {
			rt = "runc"
		}
		_, named := classes[rt]
		switch {
		case p.Size < 1 || p.Size > MaxPoolSize:
			return invalid(field+".size", "%d: want 1 to %d", p.Size, MaxPoolSize)
		case rt != "runc" && rt != "runsc" && rt != "microvm":
			return invalid(field+".runtime", "%q: want runc, runsc or microvm", p.Runtime)
		case rt != "runc" && !named:
			return invalid(field+".runtime", "%s: runtime_classes names no RuntimeClass for it", rt)
		case p.Memory < 0 || p.CPUs < 0 || p.Disk < 0 || p.Tmp < 0:
			return invalid(field, "a limit is negative")
		}
	}
	return nil
}

// PoolKeys is every pool's key, the default pool's (when it has a size) first, with
// limits filled from defaults: the runner's limits for a new sandbox. Two pools of one
// key are refused, naming the second.
func (w WarmPool) PoolKeys(defaults wire.Limits) ([]PoolKey, error) {
	var keys []PoolKey
	var fields []string
	if w.Size > 0 {
		keys, fields = append(keys, KeyOf("", defaults)), append(fields, "warm_pool.size")
	}
	for i, p := range w.Pools {
		k := p.Key(defaults)
		field := fmt.Sprintf("warm_pool.pools[%d]", i)
		for j, have := range keys {
			if have == k {
				return nil, invalid(field, "runtime %s with memory %s, cpus %g, disk %s and tmp %s is the key of %s already (a limit left out is the default)",
					k.Runtime, k.Limits.Memory, k.Limits.CPUs, k.Limits.Disk, k.Limits.Tmp, fields[j])
			}
		}
		keys, fields = append(keys, k), append(fields, field)
	}
	return keys, nil
}

// PoolSize is how many pods the pool of key keeps, with defaults as in PoolKeys; 0 when
// no pool has that key.
func (w WarmPool) PoolSize(key PoolKey, defaults wire.Limits) int {
	if w.Size > 0 && key == KeyOf("", defaults) {
		return w.Size
	}
	for _, p := range w.Pools {
		if p.Key(defaults) == key {
			return p.Size
		}
	}
	return 0
}

// Any says whether any pool is configured.
func (w WarmPool) Any() bool { return w.Size > 0 || len(w.Pools) > 0 }

// Request is a sandbox as the runner asks for it.
type Request struct {
	ID string
	// Runtime is runc, runsc or microvm: the RuntimeClass (Config.RuntimeClasses).
	Runtime string
	Limits  wire.Limits
	// Env is the commands' default environment ("K=V").
	Env  []string
	Main *wire.Command
	// UID and GID are the sandbox user's, which commands run as.
	UID, GID       uint32
	CapabilityKeys string
	// Ephemeral puts the workspace and its history on an emptyDir of the pod, bounded by
	// the disk size, which goes with the pod: for a sandbox that is not persistent, whose
	// start then waits for no volume claim to be provisioned and bound. Otherwise they are
	// on a volume claim that outlives stop and start.
	Ephemeral bool
}
