//go:build kube

package runner_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/kubespec"
	"github.com/paddockhq/paddock/internal/testenv"
	testkube "github.com/paddockhq/paddock/internal/testenv/kube"
)

// TestClusterNodeLostOutOfService: a persistent sandbox runs on the first node, which is
// then lost (its kubelet killed, its container running on). The sandbox is lost, naming
// its node. A start waits, saying what the operator must do, for as long as the node is
// only lost; once the operator taints it out-of-service, a start runs the sandbox on the
// second node, with the file its workspace held.
func TestClusterNodeLostOutOfService(t *testing.T) {
	r, c, b, spec := lostOnFirstNode(t, func(*runner.Config) {})

	// Lost, not known to be down: the start waits, and says what would end the wait.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if sb, err := r.Create(ctx, spec); err == nil {
		_ = sb.Destroy(context.Background())
		t.Fatalf("started on %s while its pod was held by the lost node", sb.Node)
	} else {
		for _, want := range []string{"held by node " + testkube.NodeName, "kubectl taint nodes " + testkube.NodeName + " " + kubespec.TaintOutOfService, "runner.force_delete_lost_pods"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("the waiting start's error %q, want %q", err, want)
			}
		}
	}

	taint(t, c, testkube.NodeName)
	startsOn(t, r, spec, b)
}

// TestClusterNodeLostForceDelete: with runner.force_delete_lost_pods, a start of a
// sandbox whose node is lost (past runner.node_lost_after), not tainted, deletes the pod
// the node holds and runs the sandbox on the second node with its workspace.
func TestClusterNodeLostForceDelete(t *testing.T) {
	r, _, b, spec := lostOnFirstNode(t, func(cfg *runner.Config) { cfg.Cluster.ForceDeleteLostPods = true })
	startsOn(t, r, spec, b)
}

// lostOnFirstNode starts the second node (cordoned until the sandbox is lost), a
// persistent sandbox on the first with a file in its workspace, and stops the first
// node's kubelet; it returns once the sandbox is lost, with the second node schedulable.
func lostOnFirstNode(t *testing.T, edit func(*runner.Config)) (*runner.Runner, *testkube.Cluster, string, runner.Spec) {
	t.Helper()
	_, cfg := onCluster(t)
	cfg.Cluster.NodeLostAfter = 5 * time.Second
	edit(&cfg)
	c := testkube.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b, err := c.AddNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Cordon(ctx, b, true); err != nil {
		t.Fatal(err)
	}
	// The other tests put their sandboxes on the first node: the second is left cordoned.
	t.Cleanup(func() {
		if err := c.Cordon(context.Background(), b, true); err != nil {
			t.Error(err)
		}
	})
	cfg, _ = asShippedRole(t, cfg, nil)
	r := runner.New(cfg, testenv.Logger(t))
	spec := runner.Spec{ID: runner.NewID(), User: "conf", Persistent: true}
	sb := createOn(t, r, spec)
	t.Cleanup(func() { _ = r.RemoveWorkspace("conf", spec.ID) })
	if sb.Node != testkube.NodeName {
		t.Fatalf("the sandbox runs on %q, want %q", sb.Node, testkube.NodeName)
	}
	execIn(t, sb, "sh", "-c", "echo survived > note")

	c.StopKubelet()
	t.Cleanup(func() {
		// The node back as it was: untainted and Ready. Its kubelet ends the pod that
		// was force-deleted from the API while its container ran on.
		untaint(t, c, testkube.NodeName)
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
	if why := sb.LastError(); !strings.Contains(why, "its node "+testkube.NodeName+" stopped reporting") {
		t.Fatalf("reason %q, want its node's loss", why)
	}
	_ = sb.Destroy(context.Background())
	if err := c.Cordon(ctx, b, false); err != nil {
		t.Fatal(err)
	}
	return r, c, b, spec
}

// startsOn starts spec and checks that it runs on node, with its workspace.
func startsOn(t *testing.T, r *runner.Runner, spec runner.Spec, node string) {
	t.Helper()
	again := createOn(t, r, spec)
	t.Cleanup(func() { _ = again.Destroy(context.Background()) })
	if again.Node != node {
		t.Fatalf("started again on %q, want %q", again.Node, node)
	}
	if got := execIn(t, again, "cat", "note"); got != "survived\n" {
		t.Fatalf("the workspace on the other node: %q", got)
	}
}

// taint marks node out-of-service, as an operator does once it is known to be down.
func taint(t *testing.T, c *testkube.Cluster, node string) {
	t.Helper()
	editNode(t, c, node, func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: kubespec.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	})
}

func untaint(t *testing.T, c *testkube.Cluster, node string) {
	t.Helper()
	editNode(t, c, node, func(n *corev1.Node) {
		var keep []corev1.Taint
		for _, tn := range n.Spec.Taints {
			if tn.Key != kubespec.TaintOutOfService {
				keep = append(keep, tn)
			}
		}
		n.Spec.Taints = keep
	})
}

func editNode(t *testing.T, c *testkube.Cluster, name string, edit func(*corev1.Node)) {
	t.Helper()
	ctx := context.Background()
	for try := 0; ; try++ {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		edit(n)
		if _, err = c.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err == nil {
			return
		} else if try > 20 {
			t.Fatalf("update node %s: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond) // the node controller wrote it meanwhile
	}
}
