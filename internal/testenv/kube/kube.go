// Package kube starts a real single-node Kubernetes cluster on this machine for tests:
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd with
// paddock's runc, the kubelet, a CNI bridge and the agent-sandbox controller (its CRDs
// installed), all on loopback and under one temporary directory. scripts/setup.sh builds
// the binaries (tools/k8s) under paddock's prefix; docs/kubernetes.md says what and how.
//
// A test package shares one cluster: its TestMain calls Main, its tests call Shared.
package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/spawn"
)

// NodeName is the cluster's one node. The kubelet refuses a loopback node address, so the
// node is named after a host name that /etc/hosts maps to 127.0.0.1 (Start adds the line
// when it is missing), and the apiserver reaches the kubelet by that name.
const NodeName = "paddock-kube-node"

// Versions of what the cluster runs (tools/k8s/go.mod pins them; scripts/setup.sh
// installs etcd).
const (
	KubernetesVersion   = "v1.36.3"
	AgentSandboxVersion = "v0.5.5"
)

// SandboxGVR is agent-sandbox's Sandbox resource.
var SandboxGVR = schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}

// Cluster is a running test cluster.
type Cluster struct {
	Dir        string // everything the cluster writes
	Kubeconfig string // a kubeconfig with cluster-admin rights (group system:masters)
	Config     *rest.Config
	Client     kubernetes.Interface
	Dynamic    dynamic.Interface
	PodSubnet  *net.IPNet // the pods' addresses, on a bridge of this cluster's own

	bin, cni, crds string
	containerdSock string // the first node's
	cgroupRoot     string
	bridge         string
	member         string
	procs          []*proc
	opts           Options
	// What AddNode needs to make a node: the CA, the API server's address, the
	// certificates' directory, and every image imported (kept as tarballs).
	ca           *authority
	server       string
	pki          string
	nodesMu      sync.Mutex // guards nodes and imageFiles
	addMu        sync.Mutex // one AddNode at a time
	nodes        []*node
	imageFiles   []string
	kwokMu       sync.Mutex
	enforcerLock *os.File // held while this cluster runs the NetworkPolicy enforcer
	bridgeNFWas  string   // bridge-nf-call-iptables before the enforcer set it, if it did
	stopOnce     sync.Once
	stopErr      error
}

// Prefix is where setup installed the cluster's binaries: $PADDOCK_PREFIX/k8s, by default
// /usr/local/lib/paddock/k8s.
func Prefix() string {
	p := os.Getenv("PADDOCK_PREFIX")
	if p == "" {
		p = "/usr/local/lib/paddock"
	}
	return filepath.Join(p, "k8s")
}

// Missing says what the cluster needs that this machine lacks (empty when nothing is):
// setup's build, Debian's etcd, paddock's runc, root.
func Missing() string {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (the kubelet and containerd need it)")
	}
	for _, b := range []string{"bin/kube-apiserver", "bin/kubelet", "bin/containerd", "bin/agent-sandbox-controller", "bin/pause", "cni/bridge", "crds"} {
		if _, err := os.Stat(filepath.Join(Prefix(), b)); err != nil {
			missing = append(missing, filepath.Join(Prefix(), b)+" (scripts/setup.sh builds it)")
		}
	}
	if _, err := os.Stat(etcdBinary); err != nil {
		missing = append(missing, etcdBinary+" (Debian's etcd-server; scripts/setup.sh installs it)")
	}
	if _, err := os.Stat(runcBinary()); err != nil {
		missing = append(missing, runcBinary()+" (scripts/setup.sh builds it)")
	}
	return strings.Join(missing, "; ")
}

const etcdBinary = "/usr/bin/etcd"

func runcBinary() string { return filepath.Join(filepath.Dir(Prefix()), "bin", "runc") }

// Options tunes Start.
type Options struct {
	// Log receives the components' output (each also goes to Dir/logs/NAME.log); nil for
	// none.
	Log io.Writer
	// NetworkPolicy runs kube-router's firewall, which enforces NetworkPolicy, beside the
	// bridge plugin (netpol.go). One such cluster runs on the machine at a time.
	NetworkPolicy bool
}

// Start brings up a cluster under a fresh temporary directory and returns when the node is
// Ready, the default service account exists, agent-sandbox's CRDs are established and its
// controller is ready, and the pause image is imported. Each wait is bound by progress:
// it fails at once when a component exits, and at a generous deadline otherwise.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if m := Missing(); m != "" {
		return nil, fmt.Errorf("test cluster: missing %s", m)
	}
	dir, err := os.MkdirTemp("", "pdkube")
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		Dir: dir, bin: filepath.Join(Prefix(), "bin"), cni: filepath.Join(Prefix(), "cni"), crds: filepath.Join(Prefix(), "crds"),
		member: fmt.Sprintf("%d-%s", os.Getpid(), filepath.Base(dir)),
	}
	c.names()
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("test cluster: %w%s", err, c.logTails()), c.Stop())
		}
	}()
	if err := joinHost(c.member, c.Dir); err != nil {
		return c, err
	}
	if err := c.start(ctx, opts); err != nil {
		return c, err
	}
	return c, nil
}

// names derives, from the cluster's directory, the names it has on the host: its cgroup
// tree and its bridge.
func (c *Cluster) names() {
	c.cgroupRoot = "/" + filepath.Base(c.Dir)
	c.bridge = "pk" + strings.TrimPrefix(filepath.Base(c.Dir), "pdkube")
	if len(c.bridge) > 15 {
		c.bridge = c.bridge[:15]
	}
}

func (c *Cluster) start(ctx context.Context, opts Options) error {
	for _, d := range []string{"pki", "logs", "etcd", "containerd", "kubelet", "cni/net.d", "cni/ipam", "webhook", "images"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o755); err != nil {
			return err
		}
	}
	pki := filepath.Join(c.Dir, "pki")
	ports, err := freePorts(4)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer, apiPort, kubeletPort := ports[0], ports[1], ports[2], ports[3]
	server := fmt.Sprintf("https://127.0.0.1:%d", apiPort)

	ca, err := newAuthority()
	if err != nil {
		return err
	}
	c.ca, c.server, c.pki, c.opts = ca, server, pki, opts
	caFile := filepath.Join(pki, "ca.crt")
	if err := os.WriteFile(caFile, ca.certPEM, 0o644); err != nil {
		return err
	}
	saPub, saKey, err := serviceAccountKey(pki)
	if err != nil {
		return err
	}
	issue := func(name, cn string, orgs []string, server bool, hosts ...string) (string, string, keyPair, error) {
		p, err := ca.issue(cn, orgs, server, hosts...)
		if err != nil {
			return "", "", p, err
		}
		cf, kf, err := p.write(pki, name)
		return cf, kf, p, err
	}
	apiCert, apiKey, _, err := issue("apiserver", "kube-apiserver", nil, true,
		"127.0.0.1", "localhost", "10.235.0.1", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")
	if err != nil {
		return err
	}
	toKubeletCert, toKubeletKey, _, err := issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, false)
	if err != nil {
		return err
	}
	writeKubeconfig := func(name, cn string, orgs []string) (string, error) {
		_, _, p, err := issue(name, cn, orgs, false)
		if err != nil {
			return "", err
		}
		file := filepath.Join(c.Dir, name+".kubeconfig")
		return file, os.WriteFile(file, kubeconfig(server, ca.certPEM, p, cn), 0o600)
	}
	if c.Kubeconfig, err = writeKubeconfig("admin", "paddock-test-admin", []string{"system:masters"}); err != nil {
		return err
	}
	kcmConfig, err := writeKubeconfig("controller-manager", "system:kube-controller-manager", nil)
	if err != nil {
		return err
	}
	schedConfig, err := writeKubeconfig("scheduler", "system:kube-scheduler", nil)
	if err != nil {
		return err
	}
	controllerConfig, err := writeKubeconfig("agent-sandbox", "agent-sandbox-controller", []string{"system:masters"})
	if err != nil {
		return err
	}

	// etcd.
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	etcd, err := c.run(opts, "etcd", etcdBinary, nil,
		"--name=paddock", "--data-dir="+filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=paddock="+peerURL, "--logger=zap", "--log-level=warn")
	if err != nil {
		return err
	}
	if err := waitFor(ctx, "etcd to answer /health", 2*time.Minute, etcd, func() error {
		return httpOK(http.DefaultClient, etcdURL+"/health")
	}); err != nil {
		return err
	}

	// The control plane.
	api, err := c.run(opts, "kube-apiserver", filepath.Join(c.bin, "kube-apiserver"), nil,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", apiPort),
		"--cert-dir="+pki, "--tls-cert-file="+apiCert, "--tls-private-key-file="+apiKey,
		"--client-ca-file="+caFile,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+saPub, "--service-account-signing-key-file="+saKey,
		"--service-cluster-ip-range=10.235.0.0/24",
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--kubelet-client-certificate="+toKubeletCert, "--kubelet-client-key="+toKubeletKey,
		"--kubelet-certificate-authority="+caFile,
		"--kubelet-preferred-address-types=Hostname",
		"--endpoint-reconciler-type=none",
		"--profiling=false")
	if err != nil {
		return err
	}
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		return err
	}
	c.Config.QPS, c.Config.Burst = -1, 0 // only the apiserver's own fairness limits the tests
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return err
	}
	if c.Dynamic, err = dynamic.NewForConfig(c.Config); err != nil {
		return err
	}
	adminTLS, err := rest.TLSConfigFor(c.Config)
	if err != nil {
		return err
	}
	adminHTTP := &http.Client{Transport: &http.Transport{TLSClientConfig: adminTLS}, Timeout: 10 * time.Second}
	if err := waitFor(ctx, "kube-apiserver to answer /readyz", 3*time.Minute, api, func() error {
		return httpOK(adminHTTP, server+"/readyz")
	}); err != nil {
		return err
	}
	kcm, err := c.run(opts, "kube-controller-manager", filepath.Join(c.bin, "kube-controller-manager"), nil,
		"--kubeconfig="+kcmConfig, "--authentication-kubeconfig="+kcmConfig, "--authorization-kubeconfig="+kcmConfig,
		"--leader-elect=false", "--secure-port=0",
		"--service-account-private-key-file="+saKey, "--root-ca-file="+caFile,
		"--use-service-account-credentials=true",
		// The in-tree hostPath provisioner gives volume claims a volume on the one node
		// (a StorageClass with provisioner kubernetes.io/host-path).
		"--enable-hostpath-provisioner=true",
		// Its default client limit (20 requests/s) would make the volume claims of the
		// scale test (1,000 sandboxes at 50/s) wait on it rather than on the cluster.
		"--kube-api-qps=500", "--kube-api-burst=1000",
		// A node whose kubelet stops is found lost (Unknown, tainted, its pods marked not
		// ready) within 2s of Kubernetes' grace period (50s), not 5s. The grace period
		// stays: KWOK renews its nodes' leases every 10s, late on a loaded machine.
		"--node-monitor-period=2s",
		"--profiling=false")
	if err != nil {
		return err
	}
	sched, err := c.run(opts, "kube-scheduler", filepath.Join(c.bin, "kube-scheduler"), nil,
		"--kubeconfig="+schedConfig, "--authentication-kubeconfig="+schedConfig, "--authorization-kubeconfig="+schedConfig,
		"--leader-elect=false", "--secure-port=0", "--profiling=false")
	if err != nil {
		return err
	}

	// The node: containerd, then the kubelet.
	if err := c.network(); err != nil {
		return err
	}
	first := &node{name: NodeName, dir: c.Dir, cgroupRoot: c.cgroupRoot, containerd: "containerd", kubelet: "kubelet"}
	c.containerdSock = first.sock()
	if err := c.startNode(ctx, first, kubeletPort); err != nil {
		return err
	}

	// agent-sandbox: its namespace, its CRDs, its controller.
	if err := c.installCRDs(ctx); err != nil {
		return err
	}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "agent-sandbox-system"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	probe, err := freePorts(1)
	if err != nil {
		return err
	}
	asc, err := c.run(opts, "agent-sandbox-controller", filepath.Join(c.bin, "agent-sandbox-controller"), nil,
		"--kubeconfig="+controllerConfig, "--extensions", "--leader-elect=false",
		// Its conversion webhook (v1alpha1) would be reached through a Service, which a
		// cluster without kube-proxy cannot route: the CRDs are installed without it.
		"--enable-webhook=false",
		"--metrics-bind-address=0", fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probe[0]))
	if err != nil {
		return err
	}

	// Ready when every component is: the controller-manager has made the default service
	// account, the node is Ready, and the controller answers its readiness probe.
	if err := waitFor(ctx, "kube-controller-manager to make the default service account", 3*time.Minute, kcm, func() error {
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return err
	}
	if err := waitFor(ctx, "the node to be Ready", 3*time.Minute, c.procByName("kubelet"), func() error { return c.nodeReady(NodeName) }); err != nil {
		return err
	}
	if opts.NetworkPolicy {
		if err := c.startEnforcer(ctx, opts); err != nil {
			return err
		}
	}
	if err := waitFor(ctx, "agent-sandbox-controller to be ready", 3*time.Minute, asc, func() error {
		return httpOK(http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/readyz", probe[0]))
	}); err != nil {
		return err
	}
	if sched.exited() {
		return fmt.Errorf("kube-scheduler exited: %v", sched.err)
	}
	return nil
}

// installCRDs creates agent-sandbox's CRDs (from its module, installed by setup) and waits
// until each is Established. Their conversion webhook is dropped (strategy None): it
// serves only the deprecated v1alpha1 and is reached through a Service this cluster
// cannot route.
func (c *Cluster) installCRDs(ctx context.Context) error {
	files, err := filepath.Glob(filepath.Join(c.crds, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs in %s", c.crds)
	}
	gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var obj map[string]any
		if err := yaml.Unmarshal(b, &obj); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		u := &unstructured.Unstructured{Object: obj}
		if err := unstructured.SetNestedField(u.Object, map[string]any{"strategy": "None"}, "spec", "conversion"); err != nil {
			return err
		}
		if _, err := c.Dynamic.Resource(gvr).Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create CRD %s: %w", u.GetName(), err)
		}
		names = append(names, u.GetName())
	}
	for _, name := range names {
		if err := waitFor(ctx, "CRD "+name+" to be established", time.Minute, nil, func() error {
			u, err := c.Dynamic.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, cond := range conds {
				m, _ := cond.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
			return errors.New("not established yet")
		}); err != nil {
			return err
		}
	}
	return nil
}

// Stop deletes the cluster's pods (so that containerd takes down their containers and
// networks), stops every component, kills what is left in the cluster's cgroups, removes
// the mounts under Dir, the bridge, the cgroups and Dir, and restores the host's sysctls
// when no other cluster runs. It is safe to call more than once.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() { c.stopErr = c.stop() })
	return c.stopErr
}

func (c *Cluster) stop() error {
	var errs []error
	// The controllers first, so that nothing recreates the pods that go; etcd last.
	for _, name := range []string{"agent-sandbox-controller", "kwok", "kube-router", "kube-scheduler", "kube-controller-manager"} {
		if p := c.procByName(name); p != nil {
			p.stop(20 * time.Second)
		}
	}
	if c.Client != nil {
		c.drainPods()
	}
	c.nodesMu.Lock()
	nodes := append([]*node(nil), c.nodes...)
	c.nodesMu.Unlock()
	var names []string
	for _, n := range nodes {
		names = append(names, n.kubelet, n.containerd)
	}
	for _, name := range append(names, "kube-apiserver", "etcd") {
		if p := c.procByName(name); p != nil {
			p.stop(20 * time.Second)
		}
	}
	c.stopEnforcer()
	for _, n := range nodes {
		killByCmdline(n.sock()) // shims left by a containerd that did not stop them
	}
	if c.cgroupRoot != "" {
		killCgroupTree(c.cgroupRoot)
		errs = append(errs, removeCgroupTree(c.cgroupRoot, time.Now().Add(time.Minute)))
	}
	errs = append(errs, runner.UnmountAll(c.Dir))
	if c.bridge != "" {
		errs = append(errs, deleteLink(c.bridge))
	}
	errs = append(errs, os.RemoveAll(c.Dir))
	if c.member != "" {
		errs = append(errs, leaveHost(c.member))
	}
	return errors.Join(errs...)
}

// drainPods deletes the real nodes' pods and waits, bounded, for their kubelets to have
// stopped them all: their containers, network namespaces and addresses go with them.
// (Simulated nodes' pods go with etcd; a node whose kubelet is stopped keeps its pods,
// whose containers are killed with the cluster's cgroups.)
func (c *Cluster) drainPods() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	grace := int64(1)
	var onNodes []metav1.ListOptions
	for _, name := range c.realNodes() {
		if n := c.node(name); n != nil {
			if p := c.procByName(n.kubelet); p != nil && !p.exited() {
				onNodes = append(onNodes, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
			}
		}
	}
	nss, err := c.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, ns := range nss.Items {
		for _, onNode := range onNodes {
			_ = c.Client.CoreV1().Pods(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, onNode)
		}
	}
	for _, onNode := range onNodes {
		for ctx.Err() == nil {
			pods, err := c.Client.CoreV1().Pods("").List(ctx, onNode)
			if err != nil || len(pods.Items) == 0 {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// LogFile is the path of a component's log: "etcd", "kube-apiserver", "kubelet", …
func (c *Cluster) LogFile(name string) string { return filepath.Join(c.Dir, "logs", name+".log") }

// logTails is the end of each component's log, for an error.
func (c *Cluster) logTails() string {
	var b strings.Builder
	for _, p := range c.procs {
		data, _ := os.ReadFile(c.LogFile(p.name))
		if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		fmt.Fprintf(&b, "\n--- %s (%s) ---\n%s", p.name, p.state(), data)
	}
	return b.String()
}

// proc is one component's process.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) state() string {
	if p.exited() {
		return fmt.Sprintf("exited: %v", p.err)
	}
	return "running"
}

// stop sends SIGTERM, then SIGKILL to the process group after grace.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// procByName is the component's latest process (the kubelet may have been restarted).
func (c *Cluster) procByName(name string) *proc {
	for i := len(c.procs) - 1; i >= 0; i-- {
		if c.procs[i].name == name {
			return c.procs[i]
		}
	}
	return nil
}

// run starts a component in a process group of its own, killed if the test process dies,
// its output in Dir/logs/NAME.log (and opts.Log).
func (c *Cluster) run(opts Options, name, bin string, env []string, args ...string) (*proc, error) {
	// Appended to: a component started again (the kubelet) keeps its earlier log.
	logFile, err := os.OpenFile(c.LogFile(name), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	var out io.Writer = logFile
	if opts.Log != nil {
		out = io.MultiWriter(logFile, prefixWriter{name: name, w: opts.Log})
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = c.Dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := spawn.Start(cmd); err != nil { // its Pdeathsig then follows this process
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	c.procs = append(c.procs, p)
	return p, nil
}

type prefixWriter struct {
	name string
	w    io.Writer
}

func (w prefixWriter) Write(b []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n")) {
		fmt.Fprintf(w.w, "%s: %s\n", w.name, line)
	}
	return len(b), nil
}

// waitFor polls check until it succeeds; it fails when p exits (if p is not nil), when ctx
// ends, or at the deadline, with check's last error.
func waitFor(ctx context.Context, what string, limit time.Duration, p *proc, check func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if p != nil && p.exited() {
			return fmt.Errorf("waiting for %s: %s exited: %v (last: %v)", what, p.name, p.err, err)
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("waiting for %s: gave up after %s: %w", what, limit, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func httpOK(client *http.Client, url string) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", url, resp.Status, body)
	}
	return nil
}

// freePorts reserves n loopback ports and releases them for the components to take. They
// are picked below the kernel's ephemeral range: a port from that range, released here and
// bound by a component seconds later, may meanwhile have become the local port of any
// process's outgoing connection (the other test packages run beside this one).
func freePorts(n int) ([]int, error) {
	const base = 10000
	top := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				top = v
			}
		}
	}
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		addr := "127.0.0.1:0" // no room below the ephemeral range: take one from it
		if top-base >= 1000 && tries < 1000 {
			addr = fmt.Sprintf("127.0.0.1:%d", base+rand.IntN(top-base))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if addr == "127.0.0.1:0" {
				return nil, err
			}
			continue // taken: try another
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

var (
	sharedMu      sync.Mutex
	shared        *Cluster
	sharedErr     error
	sharedStarted bool
	sharedOpts    Options
	mainRunning   bool
)

// Main runs a test package's tests and then stops the cluster if a test started one
// (Shared). Call it from TestMain: os.Exit(kube.Main(m)).
func Main(m *testing.M) int { return MainWith(m, Options{}) }

// MainWith is Main for a package whose cluster Shared starts with opts (its NetworkPolicy
// enforcer, say).
func MainWith(m *testing.M, opts Options) int {
	sharedMu.Lock()
	mainRunning, sharedOpts = true, opts
	sharedMu.Unlock()
	code := m.Run()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared != nil {
		if err := shared.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "kube: stopping the test cluster: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// Shared returns the test package's cluster, starting it on the first call (the package's
// TestMain must call Main, which stops it). It skips the test, saying why, when this
// machine lacks what the cluster needs (see Missing), and fails it when the cluster does
// not come up.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if !mainRunning {
		t.Fatal("kube.Shared needs the package's TestMain to call kube.Main, which stops the cluster")
	}
	if m := Missing(); m != "" {
		t.Skipf("skipping: no test cluster on this machine: missing %s", m)
	}
	if m := NetworkPolicyMissing(); sharedOpts.NetworkPolicy && m != "" {
		t.Skipf("skipping: no NetworkPolicy enforcer for the test cluster on this machine: missing %s", m)
	}
	if !sharedStarted {
		sharedStarted = true
		start := time.Now()
		shared, sharedErr = Start(context.Background(), sharedOpts)
		if sharedErr == nil {
			t.Logf("test cluster up in %s under %s", time.Since(start).Round(time.Millisecond), shared.Dir)
		}
	}
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	// A test that stops the first node's kubelet starts it again in its cleanup; one gone
	// otherwise would leave this test's pods unscheduled until its deadlines.
	if n := shared.node(NodeName); n != nil && !n.kubeletStopped.Load() {
		if p := shared.procByName(n.kubelet); p != nil && p.exited() {
			t.Fatalf("the test cluster's node %s has no kubelet (%s):%s", NodeName, p.state(), shared.logTails())
		}
	}
	return shared
}
