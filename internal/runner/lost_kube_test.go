//go:build kube

package runner_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/kubespec"
	"github.com/paddockhq/paddock/internal/testenv"
	testkube "github.com/paddockhq/paddock/internal/testenv/kube"
	"github.com/paddockhq/paddock/internal/wire"
)

// withoutPodGet is cfg acting as the shipped Role less the right to get a pod: it can list
// and watch pods but not read one, so what it learns of a pod comes through the watch.
func withoutPodGet(t *testing.T, cfg runner.Config) runner.Config {
	t.Helper()
	cfg, _ = asShippedRole(t, cfg, func(role *rbacv1.Role) {
		for i, rule := range role.Rules {
			if len(rule.Resources) == 1 && rule.Resources[0] == "pods" {
				role.Rules[i].Verbs = []string{"list", "watch", "delete"}
			}
		}
	})
	return cfg
}

// TestClusterEvictedForDisk: a sandbox that is not persistent and writes past its disk
// into its workspace's emptyDir is evicted by the kubelet (its eviction manager, not an
// ENOSPC); paddock marks it lost with the kubelet's reason, learnt through its watch on
// pods, and the same sandbox starts again with a fresh, empty workspace.
func TestClusterEvictedForDisk(t *testing.T) {
	_, cfg := onCluster(t)
	r := runner.New(withoutPodGet(t, cfg), testenv.Logger(t))
	spec := runner.Spec{ID: runner.NewID(), User: "conf", Limits: wire.Limits{Disk: wire.MinDisk}}
	sb := createOn(t, r, spec)
	defer func() { _ = sb.Destroy(context.Background()) }()
	// Past the limit, and only once written: the kubelet measures what is on disk.
	execIn(t, sb, "sh", "-c", "dd if=/dev/zero of=big bs=1M count=80 2>/dev/null && sync && echo kept > note")
	select {
	case <-sb.Exited():
	case <-time.After(3 * time.Minute):
		t.Fatal("the sandbox was not marked lost after it wrote past its disk")
	}
	why := sb.LastError()
	for _, want := range []string{"lost: its pod", "Evicted", `Usage of EmptyDir volume "workspace" exceeds the limit "64Mi"`} {
		if !strings.Contains(why, want) {
			t.Fatalf("reason %q, want the kubelet's %q", why, want)
		}
	}
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	sb = createOn(t, r, spec)
	if sb.ID != spec.ID {
		t.Fatalf("started again as %s, want %s", sb.ID, spec.ID)
	}
	if got := execIn(t, sb, "ls", "-A"); got != "" {
		t.Fatalf("the workspace after the eviction: %q, want a fresh one", got)
	}
}

// TestClusterNodeLost: the node's kubelet stops (the node lost, its containers running
// on): the node lifecycle controller finds the node lost and marks its pods not ready, and
// paddock marks the sandbox lost, saying its node stopped reporting, within the cluster's
// grace period. A start of the persistent sandbox waits for a node, and once the node is
// back runs it with its workspace.
func TestClusterNodeLost(t *testing.T) {
	_, cfg := onCluster(t)
	cfg.Cluster.NodeLostAfter = 5 * time.Second
	c := testkube.Shared(t)
	r := runner.New(withoutPodGet(t, cfg), testenv.Logger(t))
	id := runner.NewID()
	spec := runner.Spec{ID: id, User: "conf", Persistent: true}
	sb := createOn(t, r, spec)
	defer r.RemoveWorkspace("conf", id)
	execIn(t, sb, "sh", "-c", "echo survived > note")
	pod, err := c.Client.CoreV1().Pods(testNS).Get(context.Background(), id, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{kubespec.TaintNodeNotReady, kubespec.TaintNodeUnreachable} {
		if s := tolerationSeconds(pod, key); s != 5 {
			t.Errorf("the pod tolerates %s for %ds, want runner.node_lost_after's 5s", key, s)
		}
	}

	c.StopKubelet()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		if err := c.StartKubelet(ctx); err != nil && !strings.Contains(err.Error(), "is running") {
			t.Errorf("start the kubelet again: %v", err)
		}
	})
	select {
	case <-sb.Exited():
	case <-time.After(3 * time.Minute):
		t.Fatal("the sandbox was not marked lost after its node stopped reporting")
	}
	if why := sb.LastError(); !strings.Contains(why, "lost: its pod is no longer ready") ||
		!strings.Contains(why, "its node "+testkube.NodeName+" stopped reporting") {
		t.Fatalf("reason %q, want the node's loss", why)
	}
	_ = sb.Destroy(context.Background())

	// A start waits: the lost pod, whose deletion only its kubelet can finish, holds the
	// name. It is still waiting when the node comes back.
	started := make(chan error, 1)
	var again *runner.Sandbox
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		var err error
		again, err = r.Create(ctx, spec)
		started <- err
	}()
	waitRunningMode(t, id)
	select {
	case err := <-started:
		t.Fatalf("the start ended while no node was ready: %v", err)
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := c.StartKubelet(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-started; err != nil {
		t.Fatalf("start once the node is back: %v", err)
	}
	defer func() { _ = again.Destroy(context.Background()) }()
	if got := execIn(t, again, "cat", "note"); got != "survived\n" {
		t.Fatalf("workspace after the node's loss: %q", got)
	}
}

func tolerationSeconds(pod *corev1.Pod, key string) int64 {
	for _, tol := range pod.Spec.Tolerations {
		if tol.Key == key && tol.Effect == corev1.TaintEffectNoExecute && tol.TolerationSeconds != nil {
			return *tol.TolerationSeconds
		}
	}
	return -1
}

// waitRunningMode waits until sandbox id's Sandbox is set Running (a start wrote it).
func waitRunningMode(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		u, err := testkube.Shared(t).Dynamic.Resource(testkube.SandboxGVR).Namespace(testNS).Get(context.Background(), id, metav1.GetOptions{})
		if err == nil {
			if mode, _, _ := unstructured.NestedString(u.Object, "spec", "operatingMode"); mode == "Running" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s was not set Running (err %v)", id, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
