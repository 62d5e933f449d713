package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestMain runs the tests on one shared cluster, then checks that stopping it left nothing
// behind on the host: no process, mount, cgroup, interface or changed sysctl.
func TestMain(m *testing.M) {
	// The host's own sysctls, unless another test process's cluster runs (and has set them).
	var before map[string]string
	_ = withHostLock(func() error {
		if len(liveMembers()) == 0 {
			before = readSysctls()
		}
		return nil
	})
	code := Main(m)
	if shared != nil && code == 0 {
		if left := leftovers(shared, before); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: the stopped test cluster left behind:\n  %s\n", strings.Join(left, "\n  "))
			code = 1
		}
	}
	os.Exit(code)
}

func readSysctls() map[string]string {
	m := map[string]string{}
	for _, k := range kubeletSysctls {
		b, _ := os.ReadFile(filepath.Join("/proc/sys", k))
		m[k] = strings.TrimSpace(string(b))
	}
	return m
}

// leftovers lists what of the stopped cluster c is still on the host.
func leftovers(c *Cluster, sysctlsBefore map[string]string) []string {
	var left []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(c.Dir)) {
			left = append(left, fmt.Sprintf("process %s: %s", e.Name(), bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		if strings.Contains(line, c.Dir) {
			left = append(left, "mount: "+line)
		}
	}
	if _, err := os.Stat(c.Dir); err == nil {
		left = append(left, "directory "+c.Dir)
	}
	for _, h := range cgroupHierarchies() {
		if _, err := os.Stat(filepath.Join(h, c.cgroupRoot)); err == nil {
			left = append(left, "cgroup "+filepath.Join(h, c.cgroupRoot))
		}
	}
	if _, err := net.InterfaceByName(c.bridge); err == nil {
		left = append(left, "interface "+c.bridge)
	}
	// Another test process's cluster may have been running at the start or still be: then
	// the sysctls are its own.
	var others []string
	_ = withHostLock(func() error { others = liveMembers(); return nil })
	if len(others) == 0 && sysctlsBefore != nil {
		for k, v := range readSysctls() {
			if v != sysctlsBefore[k] {
				left = append(left, fmt.Sprintf("sysctl %s = %s, was %s", k, v, sysctlsBefore[k]))
			}
		}
	}
	return left
}

const helloImage = "paddock.local/hello:test"

var (
	helloOnce sync.Once
	helloErr  error
)

// importHello builds testdata/hello (static) into a root directory (/bin/hello, and /hello
// a symlink to it) and imports it with a file added (/etc/greeting) as helloImage, once.
func importHello(t *testing.T, c *Cluster) {
	t.Helper()
	helloOnce.Do(func() {
		dir := t.TempDir()
		root := filepath.Join(dir, "rootfs")
		cmd := exec.Command("go", "build", "-o", filepath.Join(root, "bin", "hello"), "./testdata/hello")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			helloErr = fmt.Errorf("build hello: %w: %s", err, out)
			return
		}
		greeting := filepath.Join(dir, "greeting")
		if helloErr = os.Symlink("bin/hello", filepath.Join(root, "hello")); helloErr != nil {
			return
		}
		if helloErr = os.WriteFile(greeting, []byte("from a file added to the image\n"), 0o644); helloErr != nil {
			return
		}
		helloErr = c.ImportImage(context.Background(), Image{
			Ref: helloImage, Rootfs: root, Files: map[string]string{"/etc/greeting": greeting}, Entrypoint: []string{"/hello"},
		})
	})
	if helloErr != nil {
		t.Fatal(helloErr)
	}
}

// namespace makes a namespace for the test, deleted after it.
func namespace(t *testing.T, c *Cluster) string {
	t.Helper()
	name := namespaceName(t)
	ctx := context.Background()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

func namespaceName(t *testing.T) string {
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 50 {
		name = name[:50]
	}
	return name
}

// poll calls check until it returns done or an error, failing the test at the deadline with
// the last state check reported.
func poll(t *testing.T, what string, limit time.Duration, check func() (done bool, state string, err error)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		done, state, err := check()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: gave up after %s; last: %s\nevents:\n%s", what, limit, state, events(t))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// events lists the cluster's events of the test's namespace (why a pod is stuck).
func events(t *testing.T) string {
	if shared == nil {
		return ""
	}
	list, err := shared.Client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range list.Items {
		if e.Namespace == namespaceName(t) {
			fmt.Fprintf(&b, "  %s %s/%s: %s: %s\n", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
	return b.String()
}

func TestPodRunsToCompletionUnderPaddocksRunc(t *testing.T) {
	c := Shared(t)
	importHello(t, c)
	ns := namespace(t, c)
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "hello", Image: helloImage, ImagePullPolicy: corev1.PullNever,
				Args: []string{"say", "hello from the test cluster"},
			}},
		},
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	poll(t, "the pod to succeed", 3*time.Minute, func() (bool, string, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "hello", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		got = p
		if p.Status.Phase == corev1.PodFailed {
			return false, "", fmt.Errorf("pod failed: %+v", p.Status)
		}
		return p.Status.Phase == corev1.PodSucceeded, fmt.Sprintf("%s %+v", p.Status.Phase, p.Status.ContainerStatuses), nil
	})
	if got.Spec.NodeName != NodeName {
		t.Errorf("pod ran on %q, want %q", got.Spec.NodeName, NodeName)
	}
	logs, err := c.Client.CoreV1().Pods(ns).GetLogs("hello", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("read the pod's logs (apiserver → kubelet): %v", err)
	}
	if !strings.Contains(string(logs), "hello from the test cluster\ngreeting: from a file added to the image\n") {
		t.Fatalf("logs = %q, want the pod's line and the image's added file", logs)
	}
	// Its memory cgroup is in the cluster's own tree (the kubelet's cgroup root).
	if !strings.Contains(string(logs), ":memory:"+c.cgroupRoot+"/kubepods") {
		t.Errorf("logs = %q, want the container in a memory cgroup under %s/kubepods", logs, c.cgroupRoot)
	}
	// containerd ran it with paddock's runc.
	id := strings.TrimPrefix(got.Status.ContainerStatuses[0].ContainerID, "containerd://")
	info, err := c.ctr(ctx, "containers", "info", id)
	if err != nil {
		t.Fatalf("ctr containers info %s: %v: %s", id, err, info)
	}
	var ci struct {
		Runtime struct {
			Name    string
			Options struct {
				Value []byte `json:"value"` // containerd.runc.v1.Options, protobuf
			}
		}
	}
	if err := json.Unmarshal([]byte(info), &ci); err != nil {
		t.Fatalf("ctr containers info %s: %v: %s", id, err, info)
	}
	if ci.Runtime.Name != "io.containerd.runc.v2" || !bytes.Contains(ci.Runtime.Options.Value, []byte(runcBinary())) {
		t.Errorf("container %s ran with runtime %s, options %q; want io.containerd.runc.v2 with BinaryName %s", id, ci.Runtime.Name, ci.Runtime.Options.Value, runcBinary())
	}
}

func TestSandboxGoesReadyThroughTheController(t *testing.T) {
	c := Shared(t)
	importHello(t, c)
	ns := namespace(t, c)
	ctx := context.Background()
	sb := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agents.x-k8s.io/v1beta1",
		"kind":       "Sandbox",
		"metadata":   map[string]any{"name": "sb", "namespace": ns},
		"spec": map[string]any{
			"podTemplate": map[string]any{
				"spec": map[string]any{
					"containers": []any{map[string]any{
						"name": "main", "image": helloImage, "imagePullPolicy": "Never", "args": []any{"wait"},
					}},
				},
			},
		},
	}}
	sandboxes := c.Dynamic.Resource(SandboxGVR).Namespace(ns)
	start := time.Now()
	if _, err := sandboxes.Create(ctx, sb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var podIPs []any
	var node string
	poll(t, "the Sandbox to be Ready", 3*time.Minute, func() (bool, string, error) {
		u, err := sandboxes.Get(ctx, "sb", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		podIPs, _, _ = unstructured.NestedSlice(u.Object, "status", "podIPs")
		node, _, _ = unstructured.NestedString(u.Object, "status", "nodeName")
		for _, cond := range conds {
			if m, _ := cond.(map[string]any); m["type"] == "Ready" && m["status"] == "True" {
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("status %v", u.Object["status"]), nil
	})
	t.Logf("Sandbox Ready in %s", time.Since(start).Round(time.Millisecond))
	if node != NodeName {
		t.Errorf("status.nodeName = %q, want %q", node, NodeName)
	}
	if len(podIPs) == 0 {
		t.Fatal("Ready with no status.podIPs")
	}
	ip := net.ParseIP(fmt.Sprint(podIPs[0]))
	if ip == nil || !c.PodSubnet.Contains(ip) {
		t.Errorf("status.podIPs = %v, want an address in the bridge's %s", podIPs, c.PodSubnet)
	}
	// The host reaches the pod at its address, over the cluster's bridge.
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(ip.String(), "8080"), time.Minute)
	if err != nil {
		t.Fatalf("dial the Sandbox's pod at %s: %v", ip, err)
	}
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	reply, err := io.ReadAll(conn)
	conn.Close()
	if err != nil || string(reply) != "hello from sb\n" {
		t.Fatalf("the pod at %s answered %q, %v; want %q", ip, reply, err, "hello from sb\n")
	}
	pod, err := c.Client.CoreV1().Pods(ns).Get(ctx, "sb", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Sandbox's pod: %v", err)
	}
	if owner := metav1.GetControllerOf(pod); owner == nil || owner.Kind != "Sandbox" || owner.Name != "sb" {
		t.Errorf("pod's controller = %+v, want the Sandbox", owner)
	}

	// Deleting the Sandbox takes its pod with it.
	if err := sandboxes.Delete(ctx, "sb", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the Sandbox's pod to go", 3*time.Minute, func() (bool, string, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "sb", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		return false, fmt.Sprintf("pod %s, deletion %v", p.Status.Phase, p.DeletionTimestamp), nil
	})
}

func TestSandboxesOnSimulatedNodes(t *testing.T) {
	c := Shared(t)
	if m := KWOKMissing(); m != "" {
		t.Skipf("skipping: no KWOK: missing %s", m)
	}
	ctx := context.Background()
	nodes, err := c.StartKWOK(ctx, 2, 500)
	if err != nil {
		t.Fatal(err)
	}
	ns := namespace(t, c)
	sandboxes := c.Dynamic.Resource(SandboxGVR).Namespace(ns)
	const n = 20
	for i := range n {
		sb := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "agents.x-k8s.io/v1beta1",
			"kind":       "Sandbox",
			"metadata":   map[string]any{"name": fmt.Sprintf("sim-%d", i), "namespace": ns},
			"spec": map[string]any{
				"podTemplate": map[string]any{
					"spec": map[string]any{
						"nodeSelector": map[string]any{"type": KWOKNodeSelector["type"]},
						"tolerations": []any{map[string]any{
							"key": KWOKToleration.Key, "operator": string(KWOKToleration.Operator), "effect": string(KWOKToleration.Effect),
						}},
						"containers": []any{map[string]any{"name": "main", "image": helloImage, "imagePullPolicy": "Never"}},
					},
				},
			},
		}}
		if _, err := sandboxes.Create(ctx, sb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	_, kwokNet, _ := net.ParseCIDR(KWOKPodCIDR)
	poll(t, "the simulated Sandboxes to be Ready", 3*time.Minute, func() (bool, string, error) {
		list, err := sandboxes.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		ready := 0
		for _, u := range list.Items {
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, cond := range conds {
				if m, _ := cond.(map[string]any); m["type"] == "Ready" && m["status"] == "True" {
					ready++
					node, _, _ := unstructured.NestedString(u.Object, "status", "nodeName")
					ips, _, _ := unstructured.NestedStringSlice(u.Object, "status", "podIPs")
					if !strings.HasPrefix(node, "kwok-node-") || len(ips) == 0 || !kwokNet.Contains(net.ParseIP(ips[0])) {
						return false, "", fmt.Errorf("sandbox %s: Ready on node %q with podIPs %v, want a simulated node and an address in %s", u.GetName(), node, ips, KWOKPodCIDR)
					}
				}
			}
		}
		return ready == n, fmt.Sprintf("%d of %d Ready", ready, n), nil
	})
	t.Logf("%d Sandboxes Ready on simulated nodes %v", n, nodes)
}
