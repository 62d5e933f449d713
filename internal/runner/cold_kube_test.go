//go:build kube

package runner_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/kube"
	"github.com/paddockhq/paddock/internal/testenv"
	testkube "github.com/paddockhq/paddock/internal/testenv/kube"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// TestClusterWorkspaceVolumes: a sandbox that is not persistent has its workspace on an
// emptyDir of its pod, bounded by its disk, with no volume claim: it runs commands and
// serves its files, and leaves nothing on the cluster once destroyed. A persistent one
// has its volume claim, bound, which its stop keeps.
func TestClusterWorkspaceVolumes(t *testing.T) {
	r, _ := onCluster(t)
	c := testkube.Shared(t)
	ctx := context.Background()
	t.Run("ephemeral", func(t *testing.T) {
		sb := createOn(t, r, runner.Spec{User: "conf", Limits: wire.Limits{Disk: 128 << 20}})
		defer sb.Destroy(ctx)
		if got := execIn(t, sb, "sh", "-c", "pwd; echo hi > f; cat f"); got != "/workspace\nhi\n" {
			t.Fatalf("exec: %q", got)
		}
		if got := readFile(t, sb, "f"); got != "hi\n" {
			t.Fatalf("read f: %q", got)
		}
		u := sandboxObject(t, sb.ID)
		if vct, _, _ := unstructured.NestedSlice(u.Object, "spec", "volumeClaimTemplates"); len(vct) != 0 {
			t.Errorf("volumeClaimTemplates %s, want none", toJSON(vct))
		}
		pod, err := c.Client.CoreV1().Pods(testNS).Get(ctx, sb.ID, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var found bool
		for _, v := range pod.Spec.Volumes {
			if v.Name == "workspace" {
				found = v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil && v.EmptyDir.SizeLimit.Value() == 128<<20
				if !found {
					t.Errorf("workspace volume %s, want an emptyDir of 128MiB", toJSON(v))
				}
			}
		}
		if !found {
			t.Errorf("the pod has no workspace volume: %s", toJSON(pod.Spec.Volumes))
		}
		if _, err := c.Client.CoreV1().PersistentVolumeClaims(testNS).Get(ctx, kube.PVCName(sb.ID), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("an ephemeral sandbox has a volume claim (err %v)", err)
		}
		if err := sb.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
		// onCluster checks that nothing is left.
	})
	t.Run("persistent", func(t *testing.T) {
		id := runner.NewID()
		sb := createOn(t, r, runner.Spec{ID: id, User: "conf", Persistent: true})
		defer r.RemoveWorkspace("conf", id)
		execIn(t, sb, "sh", "-c", "echo kept > note")
		pvc, err := c.Client.CoreV1().PersistentVolumeClaims(testNS).Get(ctx, kube.PVCName(id), metav1.GetOptions{})
		if err != nil || pvc.Status.Phase != "Bound" {
			t.Fatalf("a persistent sandbox's volume claim: %v (err %v)", pvc.Status.Phase, err)
		}
		if err := sb.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Client.CoreV1().PersistentVolumeClaims(testNS).Get(ctx, kube.PVCName(id), metav1.GetOptions{}); err != nil {
			t.Fatalf("the volume claim after stop: %v", err)
		}
	})
}

func readFile(t *testing.T, sb *runner.Sandbox, path string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := sb.Agent().Read(ctx, &pb.ReadRequest{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for {
		chunk, err := st.Recv()
		if err == io.EOF {
			return b.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		b.Write(chunk.GetData())
	}
}

// TestClusterLostPodSeenByTheWatch: a pod evicted, or deleted by hand, makes its sandbox
// lost with the reason the pod gave, seen by paddock's watch on pods. The control plane
// acts here as the shipped Role less the right to get a pod: it can list and watch pods
// but not read one, so the reason can come only through the watch.
func TestClusterLostPodSeenByTheWatch(t *testing.T) {
	_, cfg := onCluster(t)
	cfg, _ = asShippedRole(t, cfg, func(role *rbacv1.Role) {
		for i, rule := range role.Rules {
			if len(rule.Resources) == 1 && rule.Resources[0] == "pods" {
				role.Rules[i].Verbs = []string{"list", "watch", "delete"}
			}
		}
	})
	r := runner.New(cfg, testenv.Logger(t))
	pods := testkube.Shared(t).Client.CoreV1().Pods(testNS)
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		end  func(id string) error
		want string
	}{
		{"evicted", func(id string) error {
			return pods.EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: testNS}})
		}, "EvictionByEvictionAPI"},
		{"deleted", func(id string) error { return pods.Delete(ctx, id, metav1.DeleteOptions{}) }, "deleted while Running"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sb := createOn(t, r, runner.Spec{User: "conf"})
			defer sb.Destroy(ctx)
			if _, err := pods.Get(ctx, sb.ID, metav1.GetOptions{}); err != nil {
				t.Fatal(err) // as the cluster's admin
			}
			if err := tt.end(sb.ID); err != nil {
				t.Fatal(err)
			}
			select {
			case <-sb.Exited():
			case <-time.After(2 * time.Minute):
				t.Fatal("the sandbox was not marked lost")
			}
			if why := sb.LastError(); !strings.Contains(why, "lost: its pod") || !strings.Contains(why, tt.want) {
				t.Fatalf("reason %q, want the pod's %q", why, tt.want)
			}
		})
	}
}
