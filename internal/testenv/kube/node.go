package kube

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// SecondNodeName is the node AddNode starts beside the first, on the same machine. Like
// the first, it is named after a host name /etc/hosts maps to 127.0.0.1.
const SecondNodeName = "paddock-kube-node-b"

// node is one real node: a containerd and a kubelet of its own.
type node struct {
	name string
	// dir holds its containerd/ and kubelet/ directories and its files.
	dir string
	// cgroupRoot is the cgroup its kubelet puts its pods under. A second node's is inside
	// the first's tree, which the cluster's Stop kills and removes whole; each kubelet
	// cleans up only its own kubepods under its root.
	cgroupRoot string
	// containerd and kubelet are its processes' names (procByName, LogFile).
	containerd, kubelet string
	startKubelet        func() (*proc, error)
	// kubeletStopped is set by StopKubeletOf and cleared by StartKubeletOf: a kubelet gone
	// without it was killed by something else.
	kubeletStopped atomic.Bool
}

func (n *node) sock() string { return filepath.Join(n.dir, "containerd", "containerd.sock") }

// network writes the CNI configuration every node shares: one bridge and one address
// pool (host-local's, which locks its data directory), so that the pods of every node are
// on the same subnet and reach each other.
func (c *Cluster) network() error {
	var err error
	if c.PodSubnet, err = freeSubnet(os.Getpid()); err != nil {
		return err
	}
	conflist := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "paddock-kube",
  "plugins": [{
    "type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}
  }]
}
`, c.bridge, c.PodSubnet.String(), filepath.Join(c.Dir, "cni", "ipam"))
	return os.WriteFile(filepath.Join(c.Dir, "cni", "net.d", "10-paddock.conflist"), []byte(conflist), 0o644)
}

// startNode starts node n: its containerd (with paddock's runc, its own root, state and
// socket, and the shared CNI bridge), imports the pause image, and starts its kubelet on
// port with a client and serving certificate of its own name.
func (c *Cluster) startNode(ctx context.Context, n *node, port int) error {
	cd := filepath.Join(n.dir, "containerd")
	for _, d := range []string{cd, filepath.Join(n.dir, "kubelet")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	config := fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = %[5]q
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.cri.v1.images']
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = %[6]q
  [plugins.'io.containerd.cri.v1.runtime']
    # Root here lacks CAP_SYS_RESOURCE: without this every pod sandbox fails to raise its
    # oom_score_adj (nsexec: Permission denied).
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = %[7]q
          Root = %[8]q
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [%[9]q]
      conf_dir = %[10]q
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
`, filepath.Join(cd, "root"), filepath.Join(cd, "state"), n.sock(), n.sock()+".ttrpc",
		filepath.Join(cd, "opt"), PauseImage, runcBinary(), filepath.Join(cd, "runc"), c.cni, filepath.Join(c.Dir, "cni", "net.d"))
	configFile := filepath.Join(cd, "config.toml")
	if err := os.WriteFile(configFile, []byte(config), 0o644); err != nil {
		return err
	}
	// PATH: the shim next to containerd; no /usr/sbin, so that nothing reaches for iptables.
	path := "PATH=" + c.bin + ":/usr/bin:/bin"
	containerd, err := c.run(c.opts, n.containerd, filepath.Join(c.bin, "containerd"), []string{path}, "--config="+configFile)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, n.containerd+" to answer", 2*time.Minute, containerd, func() error {
		_, err := c.ctrAt(ctx, n.sock(), "version")
		return err
	}); err != nil {
		return err
	}
	if err := c.importInto(ctx, n.sock(), Image{Ref: PauseImage, Files: map[string]string{"/pause": filepath.Join(c.bin, "pause")}, Entrypoint: []string{"/pause"}}); err != nil {
		return err
	}

	if err := makeCgroupRoot(n.cgroupRoot); err != nil {
		return err
	}
	caFile := filepath.Join(c.pki, "ca.crt")
	serving, err := c.ca.issue("system:node:"+n.name, []string{"system:nodes"}, true, n.name, "127.0.0.1")
	if err != nil {
		return err
	}
	certFile, keyFile, err := serving.write(n.dir, "kubelet")
	if err != nil {
		return err
	}
	client, err := c.ca.issue("system:node:"+n.name, []string{"system:nodes"}, false)
	if err != nil {
		return err
	}
	kubeconfigFile := filepath.Join(n.dir, "node.kubeconfig")
	if err := os.WriteFile(kubeconfigFile, kubeconfig(c.server, c.ca.certPEM, client, "system:node:"+n.name), 0o600); err != nil {
		return err
	}
	kubeletConfig := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %q}
authorization: {mode: Webhook}
tlsCertFile: %q
tlsPrivateKeyFile: %q
containerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
cgroupRoot: %q
failCgroupV1: false
failSwapOn: false
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
serializeImagePulls: false
syncFrequency: 10s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
# The eviction manager looks every 10s; it sees an emptyDir's use as of the last
# measurement, every minute by default.
volumeStatsAggPeriod: 5s
nodeLeaseDurationSeconds: 10
nodeStatusUpdateFrequency: 2s
# A directory of the node's own: a kubelet's container GC removes every pod's log
# directory there that it does not run, which in the shared default, /var/log/pods, is
# the other node's pods'.
podLogsDir: %q
`, port, caFile, certFile, keyFile, n.sock(), n.cgroupRoot, filepath.Join(n.dir, "pods-logs"))
	kubeletConfigFile := filepath.Join(n.dir, "kubelet.yaml")
	if err := os.WriteFile(kubeletConfigFile, []byte(kubeletConfig), 0o644); err != nil {
		return err
	}
	n.startKubelet = func() (*proc, error) {
		return c.run(c.opts, n.kubelet, filepath.Join(c.bin, "kubelet"), []string{path},
			"--config="+kubeletConfigFile, "--kubeconfig="+kubeconfigFile,
			"--root-dir="+filepath.Join(n.dir, "kubelet"), "--hostname-override="+n.name)
	}
	// Every image imported so far, before the kubelet registers the node and is given
	// pods; held, so that an import meanwhile (ImportImage) reaches this node too.
	c.nodesMu.Lock()
	for _, f := range c.imageFiles {
		if out, err := c.ctrAt(ctx, n.sock(), "images", "import", "--platform", "linux/"+goarch(), f); err != nil {
			c.nodesMu.Unlock()
			return fmt.Errorf("import %s: %w: %s", filepath.Base(f), err, out)
		}
	}
	c.nodes = append(c.nodes, n)
	c.nodesMu.Unlock()
	_, err = n.startKubelet()
	return err
}

// AddNode starts a second real node, SecondNodeName, on this machine beside the first: a
// containerd of its own (its own root, state and socket; the same CNI bridge and address
// pool), with every image imported so far, and a kubelet of its own (its own root
// directory, port and certificates, its pods under a cgroup of its own). It returns the
// node's name once the node is Ready; a second call returns it again. The cluster's Stop
// takes it down with the rest. Volumes from the hostPath provisioner carry no node
// affinity and are directories of this one machine, so either node mounts them.
func (c *Cluster) AddNode(ctx context.Context) (string, error) {
	c.addMu.Lock()
	defer c.addMu.Unlock()
	if c.node(SecondNodeName) != nil {
		return SecondNodeName, nil
	}
	ports, err := freePorts(1)
	if err != nil {
		return "", err
	}
	n := &node{name: SecondNodeName, dir: filepath.Join(c.Dir, "nodes", SecondNodeName),
		cgroupRoot: c.cgroupRoot + "/" + SecondNodeName, containerd: "containerd-" + SecondNodeName, kubelet: "kubelet-" + SecondNodeName}
	if err := c.startNode(ctx, n, ports[0]); err != nil {
		return "", fmt.Errorf("node %s: %w%s", n.name, err, c.logTails())
	}
	if err := waitFor(ctx, "node "+n.name+" to be Ready", 3*time.Minute, c.procByName(n.kubelet), func() error { return c.nodeReady(n.name) }); err != nil {
		return "", fmt.Errorf("%w%s", err, c.logTails())
	}
	return n.name, nil
}

// node is the node named name, or nil.
func (c *Cluster) node(name string) *node {
	c.nodesMu.Lock()
	defer c.nodesMu.Unlock()
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// realNodes is the real nodes' names.
func (c *Cluster) realNodes() []string {
	c.nodesMu.Lock()
	defer c.nodesMu.Unlock()
	var names []string
	for _, n := range c.nodes {
		names = append(names, n.name)
	}
	return names
}

// StopKubelet kills the first node's kubelet, and only it, as a node lost would: its
// pods' containers run on under containerd, but nothing reports the node or acts on its
// pods, so that the node lifecycle controller finds it lost (Unknown, tainted
// unreachable) after its grace period.
func (c *Cluster) StopKubelet() { c.StopKubeletOf(NodeName) }

// StopKubeletOf is StopKubelet for the node named name.
func (c *Cluster) StopKubeletOf(name string) {
	n := c.node(name)
	if n == nil {
		return
	}
	n.kubeletStopped.Store(true)
	if p := c.procByName(n.kubelet); p != nil && !p.exited() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// StartKubelet starts the first node's kubelet again after StopKubelet and waits until
// the node is Ready.
func (c *Cluster) StartKubelet(ctx context.Context) error { return c.StartKubeletOf(ctx, NodeName) }

// StartKubeletOf is StartKubelet for the node named name.
func (c *Cluster) StartKubeletOf(ctx context.Context, name string) error {
	n := c.node(name)
	if n == nil {
		return fmt.Errorf("no node %s", name)
	}
	if p := c.procByName(n.kubelet); p != nil && !p.exited() {
		return errors.New("the kubelet is running")
	}
	p, err := n.startKubelet()
	if err != nil {
		return err
	}
	n.kubeletStopped.Store(false)
	return waitFor(ctx, "node "+name+" to be Ready again", 3*time.Minute, p, func() error { return c.nodeReady(name) })
}

// Cordon marks node name unschedulable (or schedulable again, with on false), as
// `kubectl cordon` does: the pods on it stay, new ones go elsewhere.
func (c *Cluster) Cordon(ctx context.Context, name string, on bool) error {
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("cordon node %s: %w", name, err)
	}
	return nil
}

// nodeReady says why node name is not Ready, or nil when it is.
func (c *Cluster) nodeReady(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			if cond.Status == corev1.ConditionTrue {
				return nil
			}
			return fmt.Errorf("node %s: Ready=%s: %s", name, cond.Status, cond.Message)
		}
	}
	return fmt.Errorf("node %s: no Ready condition yet", name)
}
