//go:build kube

package netpol_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/paddockhq/paddock/internal/sandbox/kube"
	testkube "github.com/paddockhq/paddock/internal/testenv/kube"
	"github.com/paddockhq/paddock/internal/wire"
)

const (
	deployDir    = "../../../../deploy/kubernetes"
	probeImage   = "paddock.local/netprobe:test"
	cpNamespace  = "paddock"   // where the shipped policy lets the control plane in from
	elsewhere    = "elsewhere" // a namespace no policy covers
	otherPort    = 8080        // a port besides the agent's on each sandbox pod
	probeTimeout = time.Minute
)

func TestMain(m *testing.M) {
	os.Exit(testkube.MainWith(m, testkube.Options{NetworkPolicy: true}))
}

// TestShippedNetworkPolicyEnforced applies namespace.yaml and networkpolicy.yaml as
// shipped and probes from real pods. Each denial has a control: the same target reached
// from a pod in a namespace no policy covers (or, for a pod's port, from the node, which
// the enforcer always lets in), so a denial is the policy's and not a dead target's.
func TestShippedNetworkPolicyEnforced(t *testing.T) {
	c := testkube.Shared(t)
	ctx := context.Background()
	importProbe(t, c)
	policies := applyShipped(t, c, kube.DefaultNamespace)
	for _, ns := range []string{cpNamespace, elsewhere} {
		createNamespace(t, c, ns)
	}
	sandboxLabels := func(id string) map[string]string {
		return map[string]string{kube.LabelManagedBy: kube.ManagedBy, kube.LabelSandbox: id}
	}
	sbA := runPod(t, c, kube.DefaultNamespace, "sb-a", sandboxLabels("sb-a"))
	sbB := runPod(t, c, kube.DefaultNamespace, "sb-b", sandboxLabels("sb-b"))
	hostile := runPod(t, c, kube.DefaultNamespace, "hostile", map[string]string{"app": "hostile"})
	cp := runPod(t, c, cpNamespace, "control-plane", map[string]string{"app.kubernetes.io/name": "paddock"})
	cpUnlabelled := runPod(t, c, cpNamespace, "not-paddock", map[string]string{"app": "other"})
	outsider := runPod(t, c, elsewhere, "outsider", nil)
	for _, p := range []*corev1.Pod{sbA, sbB, hostile, cp, cpUnlabelled, outsider} {
		waitFirewall(t, c, p, policies)
	}

	// What a sandbox pod might reach on the node and beyond, served by this test: the
	// node as the pods see it (the bridge's address), the API server and the kubelet
	// where a real cluster serves them (the node's address; here relays to their
	// loopback ports), a DNS server, and the node's address off the pod network standing
	// for the internet.
	gw := gateway(c.PodSubnet)
	apiAddr, err := url.Parse(c.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	node, err := c.Client.CoreV1().Nodes().Get(ctx, testkube.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubeletAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(node.Status.DaemonEndpoints.KubeletEndpoint.Port)))
	targets := []target{
		{"a host port on the node", "tcp", serveTCP(t, gw, nil)},
		{"the API server", "tcp", serveTCP(t, gw, relayTo(apiAddr.Host))},
		{"the kubelet", "tcp", serveTCP(t, gw, relayTo(kubeletAddr))},
		{"DNS on the node", "udp", serveUDP(t, gw)},
		{"off the cluster", "tcp", serveTCP(t, offCluster(t), nil)},
	}
	agentB := net.JoinHostPort(sbB.Status.PodIP, strconv.Itoa(wire.PodAgentPort))
	otherB := net.JoinHostPort(sbB.Status.PodIP, strconv.Itoa(otherPort))
	agentHostile := net.JoinHostPort(hostile.Status.PodIP, strconv.Itoa(wire.PodAgentPort))

	t.Run("controls", func(t *testing.T) {
		for _, tg := range targets {
			if out, ok := probe(t, c, outsider, tg.network, tg.addr); !ok {
				t.Errorf("%s (%s %s) is not reached even from a pod no policy covers: %s", tg.name, tg.network, tg.addr, out)
			}
		}
		for _, addr := range []string{agentB, otherB, agentHostile} {
			if out, err := dialFromNode(addr); err != nil {
				t.Errorf("%s is not reached even from the node: %v", addr, err)
			} else if !strings.HasPrefix(out, "HELLO") {
				t.Errorf("%s answered the node %q", addr, out)
			}
		}
	})
	t.Run("a sandbox reaches nothing", func(t *testing.T) {
		all := slices.Concat(targets, []target{
			{"another sandbox's agent port", "tcp", agentB},
			{"another sandbox's other port", "tcp", otherB},
			{"a pod in the namespace that is no sandbox", "tcp", agentHostile},
		})
		for _, tg := range all {
			if out, ok := probe(t, c, sbA, tg.network, tg.addr); ok {
				t.Errorf("a sandbox reached %s (%s %s): %s", tg.name, tg.network, tg.addr, out)
			}
		}
	})
	t.Run("the control plane reaches the agent's port alone", func(t *testing.T) {
		if out, ok := probe(t, c, cp, "tcp", agentB); !ok || !strings.Contains(out, "HELLO") {
			t.Errorf("the control plane's pod did not reach the agent's port %s: %s", agentB, out)
		}
		if out, ok := probe(t, c, cp, "tcp", otherB); ok {
			t.Errorf("the control plane's pod reached a sandbox's port %s besides the agent's: %s", otherB, out)
		}
	})
	t.Run("no other pod reaches an agent", func(t *testing.T) {
		for _, from := range []*corev1.Pod{hostile, cpUnlabelled, outsider} {
			if out, ok := probe(t, c, from, "tcp", agentB); ok {
				t.Errorf("pod %s/%s reached a sandbox's agent port %s: %s", from.Namespace, from.Name, agentB, out)
			}
		}
	})
	// kube-router's firewall lets every pod reach the node's NodePort range whatever the
	// policies say (docs/kubernetes.md says so, and what closes it): this pins that.
	t.Run("the enforcer's exemption: the node's NodePort range", func(t *testing.T) {
		addr := serveNodePort(t, gw)
		if out, ok := probe(t, c, sbA, "tcp", addr); !ok {
			t.Errorf("a sandbox no longer reaches the node's NodePort range (%s): %s; docs/kubernetes.md says it does under kube-router", addr, out)
		}
	})
	t.Run("a pod in the namespace that is no sandbox reaches nothing", func(t *testing.T) {
		for _, tg := range targets {
			if out, ok := probe(t, c, hostile, tg.network, tg.addr); ok {
				t.Errorf("a pod in the sandboxes' namespace reached %s (%s %s): %s", tg.name, tg.network, tg.addr, out)
			}
		}
	})
}

// target is something a pod might reach.
type target struct{ name, network, addr string }

// importProbe builds testdata/netprobe (static) and imports it as probeImage.
func importProbe(t *testing.T, c *testkube.Cluster) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "netprobe")
	cmd := exec.Command("go", "build", "-o", bin, "./testdata/netprobe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build netprobe: %v: %s", err, out)
	}
	if err := c.ImportImage(context.Background(), testkube.Image{Ref: probeImage, Files: map[string]string{"/netprobe": bin}}); err != nil {
		t.Fatal(err)
	}
}

type networkPolicy = networkingv1.NetworkPolicy

// applyShipped creates the sandboxes' namespace and the NetworkPolicies from
// deploy/kubernetes as they are shipped, the policies in namespace ns, and returns them.
func applyShipped(t *testing.T, c *testkube.Cluster, ns string) []networkPolicy {
	t.Helper()
	ctx := context.Background()
	var sbNamespace corev1.Namespace
	if err := yaml.UnmarshalStrict(readDeploy(t, "namespace.yaml"), &sbNamespace); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &sbNamespace, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	var policies []networkingv1.NetworkPolicy
	for _, doc := range bytes.Split(readDeploy(t, "networkpolicy.yaml"), []byte("\n---\n")) {
		var p networkingv1.NetworkPolicy
		if err := yaml.UnmarshalStrict(doc, &p); err != nil {
			t.Fatal(err)
		}
		p.Namespace = ns
		if _, err := c.Client.NetworkingV1().NetworkPolicies(p.Namespace).Create(ctx, &p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		policies = append(policies, p)
	}
	return policies
}

func readDeploy(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func createNamespace(t *testing.T, c *testkube.Cluster, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.Client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// runPod starts a pod serving the agent's port and another, locked down as a sandbox's
// pod is, and returns it once it runs with an address.
func runPod(t *testing.T, c *testkube.Cluster, namespace, name string, labels map[string]string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	no, yes := false, true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "probe", Image: probeImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/netprobe", "serve", strconv.Itoa(wire.PodAgentPort), strconv.Itoa(otherPort)},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
	if _, err := c.Client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Pods(namespace).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	var got *corev1.Pod
	poll(t, "pod "+namespace+"/"+name+" to run", 3*time.Minute, func() (bool, string) {
		p, err := c.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			t.Fatalf("pod %s/%s ended: %s %s", namespace, name, p.Status.Phase, p.Status.Message)
		}
		got = p
		return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "", fmt.Sprintf("%s %q", p.Status.Phase, p.Status.PodIP)
	})
	return got
}

// waitFirewall waits until the enforcer has programmed the pod and, for a pod a policy
// selects, the policy's rules: it acts when it sees a pod's address, not before.
func waitFirewall(t *testing.T, c *testkube.Cluster, p *corev1.Pod, policies []networkingv1.NetworkPolicy) {
	t.Helper()
	selected := false
	for _, np := range policies {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			t.Fatal(err)
		}
		selected = selected || np.Namespace == p.Namespace && sel.Matches(labels.Set(p.Labels))
	}
	poll(t, "the firewall of pod "+p.Namespace+"/"+p.Name, 2*time.Minute, func() (bool, string) {
		rules, err := c.PodFirewall(p.Namespace, p.Name)
		if err != nil {
			return false, err.Error()
		}
		return !selected || strings.Contains(rules, "KUBE-NWPLCY-"), rules
	})
}

// probe runs netprobe in pod p against addr and says whether it got through.
func probe(t *testing.T, c *testkube.Cluster, p *corev1.Pod, network, addr string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(testkube.Prefix(), "bin", "kubectl"), "--kubeconfig="+c.Kubeconfig,
		"exec", "-n", p.Namespace, p.Name, "--", "/netprobe", network, addr)
	out, err := cmd.CombinedOutput()
	s := strings.TrimSpace(string(out))
	switch {
	case err == nil && strings.HasPrefix(s, "REACHED"):
		return s, true
	case strings.HasPrefix(s, "UNREACHED"):
		return s, false
	}
	t.Fatalf("probe %s %s from %s/%s: %v: %s", network, addr, p.Namespace, p.Name, err, s)
	return "", false
}

func dialFromNode(addr string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(conn)
	return string(b), err
}

// gateway is the bridge's address on the pod network: the node, as its pods see it.
func gateway(subnet *net.IPNet) string {
	gw := make(net.IP, 4)
	copy(gw, subnet.IP.To4())
	gw[3]++
	return gw.String()
}

// offCluster is the node's address on its default route, off the pod network: it stands
// for the internet (the test must reach nothing off this machine).
func offCluster(t *testing.T) string {
	t.Helper()
	conn, err := net.Dial("udp4", "192.0.2.1:9") // no packet is sent: this asks the routing table
	if err != nil {
		t.Skipf("skipping: no default route, so no address off the pod network to stand for the internet: %v", err)
	}
	defer conn.Close()
	return conn.LocalAddr().(*net.UDPAddr).IP.String()
}

// serveTCP listens on host at a free port: each connection is handed to handle, or
// answered "NODE" when handle is nil. It returns the address.
func serveTCP(t *testing.T, host string, handle func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if handle == nil {
		handle = func(c net.Conn) { fmt.Fprintln(c, "NODE"); c.Close() }
	}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go handle(conn)
		}
	}()
	return l.Addr().String()
}

// serveNodePort listens on host at a free port of the NodePort range (30000-32767, the
// apiserver's and kube-router's default) and returns the address.
func serveNodePort(t *testing.T, host string) string {
	t.Helper()
	for port := 30000 + os.Getpid()%2000; port <= 32767; port++ {
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			continue
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				conn, err := l.Accept()
				if err != nil {
					return
				}
				fmt.Fprintln(conn, "NODE")
				conn.Close()
			}
		}()
		return l.Addr().String()
	}
	t.Fatal("no free port in the NodePort range")
	return ""
}

// relayTo hands each connection to a component listening on the node's loopback.
func relayTo(addr string) func(net.Conn) {
	return func(in net.Conn) {
		defer in.Close()
		out, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			return
		}
		defer out.Close()
		go func() { _, _ = io.Copy(out, in) }()
		_, _ = io.Copy(in, out)
	}
}

// serveUDP answers each datagram on host at a free port, as a DNS server would.
func serveUDP(t *testing.T, host string) string {
	t.Helper()
	pc, err := net.ListenPacket("udp4", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err == nil {
				_, _ = pc.WriteTo(append([]byte("ANSWER "), buf[:n]...), from)
			}
		}
	}()
	return pc.LocalAddr().String()
}

// poll calls check until it says done, failing the test at the deadline with the last
// state it reported.
func poll(t *testing.T, what string, limit time.Duration, check func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		done, state := check()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: gave up after %s: %s", what, limit, state)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
