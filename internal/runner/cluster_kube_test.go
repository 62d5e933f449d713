//go:build kube

package runner_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/kube"
	"github.com/paddockhq/paddock/internal/sandbox/kube/kubetest"
	"github.com/paddockhq/paddock/internal/testenv"
	testkube "github.com/paddockhq/paddock/internal/testenv/kube"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
	"github.com/paddockhq/paddock/internal/wire/channel"
)

// onCluster is a runner whose sandboxes run on the test cluster, and its configuration.
func onCluster(t *testing.T) (*runner.Runner, runner.Config) {
	t.Helper()
	testenv.RequireRoot(t)
	cfg := kubetest.Config(t, testenv.Config(t))
	t.Cleanup(func() {
		for _, o := range kubetest.Leftovers(t) {
			t.Errorf("left on the cluster: %s", o)
		}
	})
	return runner.New(cfg, testenv.Logger(t)), cfg
}

func createOn(t *testing.T, r *runner.Runner, spec runner.Spec) *runner.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sb, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return sb
}

func execIn(t *testing.T, sb *runner.Sandbox, argv ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := sb.Agent().Process().Execute(ctx, &pb.ExecuteRequest{Argv: argv})
	if err != nil {
		t.Fatalf("exec %q: %v", argv, err)
	}
	if res.GetStatus().GetExitCode() != 0 {
		t.Fatalf("exec %q: exit %d: %s", argv, res.GetStatus().GetExitCode(), res.GetStderr())
	}
	return string(res.GetStdout())
}

// TestClusterExecRoundTrip: a sandbox on the cluster runs a command through the runner,
// as the sandbox user, in its workspace, and says which node it is on.
func TestClusterExecRoundTrip(t *testing.T) {
	r, _ := onCluster(t)
	sb := createOn(t, r, runner.Spec{User: "conf", Limits: wire.Limits{Memory: 256 << 20}})
	if sb.Node != testkube.NodeName {
		t.Errorf("node %q, want %q", sb.Node, testkube.NodeName)
	}
	if got := execIn(t, sb, "sh", "-c", "id -u; pwd; echo hi > f; cat f"); got != "1000\n/workspace\nhi\n" {
		t.Fatalf("exec: %q", got)
	}
	select {
	case <-sb.Exited():
		t.Fatalf("exited while running: %s", sb.LastError())
	default:
	}
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sb.Exited(): // as every tier's: whoever watches it is let go
	default:
		t.Fatal("Exited is still open after Destroy")
	}
}

// podIP is the address of sandbox id's pod, from its Sandbox's status.
func podIP(t *testing.T, id string) string {
	t.Helper()
	u := sandboxObject(t, id)
	ips, _, _ := unstructured.NestedStringSlice(u.Object, "status", "podIPs")
	if len(ips) == 0 {
		t.Fatalf("sandbox %s has no pod IP", id)
	}
	return ips[0]
}

// TestClusterChannelIdentity: over the real pod network, the pod holding sandbox A's
// Secret cannot answer as sandbox B, and a client without the control plane's
// certificate is refused by the agent.
func TestClusterChannelIdentity(t *testing.T) {
	r, cfg := onCluster(t)
	a := createOn(t, r, runner.Spec{User: "conf"})
	defer a.Destroy(context.Background())
	ip := podIP(t, a.ID)
	ca, err := kube.LoadCA(cfg.Cluster.CADir)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := ca.IssueControlPlane()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(ip, strconv.Itoa(wire.PodAgentPort))
	call := func(cfg *tls.Config) error {
		conn, err := grpc.NewClient(addr, append(channel.DialOptions(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))...)
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = pb.NewAgentClient(conn).Info(ctx, &pb.InfoRequest{})
		return err
	}
	asA, _ := ca.ClientConfig(cp, a.ID)
	if err := call(asA); err != nil {
		t.Fatalf("the control plane reaching A at %s: %v", addr, err)
	}
	asB, _ := ca.ClientConfig(cp, runner.NewID())
	if err := call(asB); err == nil {
		t.Fatal("A's pod answered as another sandbox")
	}
	bare := asA.Clone()
	bare.Certificates = nil
	if err := call(bare); err == nil {
		t.Fatal("A's agent served a client without the control plane's certificate")
	}
}

// TestClusterStopStartKeepsTheWorkspace: a persistent sandbox's stop suspends its Sandbox
// (the pod goes, the volume stays) and its start resumes it with the workspace as it was.
func TestClusterStopStartKeepsTheWorkspace(t *testing.T) {
	r, _ := onCluster(t)
	id := runner.NewID()
	spec := runner.Spec{ID: id, User: "conf", Persistent: true}
	sb := createOn(t, r, spec)
	execIn(t, sb, "sh", "-c", "echo kept > note")
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatalf("stop: %v", err)
	}
	defer r.RemoveWorkspace("conf", id)
	u := sandboxObject(t, id)
	if mode, _, _ := unstructured.NestedString(u.Object, "spec", "operatingMode"); mode != "Suspended" {
		t.Fatalf("operatingMode after stop: %q", mode)
	}
	if _, err := testkube.Shared(t).Client.CoreV1().Pods(testNS).Get(context.Background(), id, metav1.GetOptions{}); err == nil {
		t.Fatal("the pod is still there after stop")
	}
	sb = createOn(t, r, spec)
	if got := execIn(t, sb, "cat", "note"); got != "kept\n" {
		t.Fatalf("workspace after start: %q", got)
	}
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.RemoveWorkspace("conf", id); err != nil {
		t.Fatalf("remove: %v", err)
	}
}

// TestClusterLostPod: a pod that goes (evicted, its node lost, deleted by hand) makes the
// sandbox lost with the reason, and suspended, so that nothing starts it behind paddock's
// back; a start takes it back, with its workspace.
func TestClusterLostPod(t *testing.T) {
	r, _ := onCluster(t)
	id := runner.NewID()
	spec := runner.Spec{ID: id, User: "conf", Persistent: true}
	sb := createOn(t, r, spec)
	defer r.RemoveWorkspace("conf", id)
	execIn(t, sb, "sh", "-c", "echo survived > note")
	if err := testkube.Shared(t).Client.CoreV1().Pods(testNS).Delete(context.Background(), id, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sb.Exited():
	case <-time.After(2 * time.Minute):
		t.Fatal("the sandbox was not marked lost after its pod was deleted")
	}
	if why := sb.LastError(); !strings.Contains(why, "lost") || !strings.Contains(why, "pod") {
		t.Fatalf("reason %q", why)
	}
	_ = sb.Destroy(context.Background())
	sb = createOn(t, r, spec)
	if got := execIn(t, sb, "cat", "note"); got != "survived\n" {
		t.Fatalf("workspace after the restart: %q", got)
	}
	_ = sb.Destroy(context.Background())
}

// TestClusterHandEditRefused: a Sandbox whose pod template is edited by hand (here: the
// agent's container made privileged) is not trusted: paddock writes its own template back,
// ends the pod and marks the sandbox lost, saying so.
func TestClusterHandEditRefused(t *testing.T) {
	r, _ := onCluster(t)
	sb := createOn(t, r, runner.Spec{User: "conf"})
	defer sb.Destroy(context.Background())
	patch := `{"spec":{"podTemplate":{"spec":{"containers":[{"name":"agent","securityContext":{"privileged":true,"allowPrivilegeEscalation":true}}]}}}}`
	dc := testkube.Shared(t).Dynamic
	if _, err := dc.Resource(testkube.SandboxGVR).Namespace(testNS).Patch(context.Background(), sb.ID, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sb.Exited():
	case <-time.After(2 * time.Minute):
		t.Fatal("a hand-edited Sandbox was trusted")
	}
	if why := sb.LastError(); !strings.Contains(why, "edited") {
		t.Fatalf("reason %q", why)
	}
	u := sandboxObject(t, sb.ID)
	ctrs, _, _ := unstructured.NestedSlice(u.Object, "spec", "podTemplate", "spec", "containers")
	if len(ctrs) != 1 || strings.Contains(toJSON(ctrs[0]), `"privileged":true`) {
		t.Fatalf("the edit is still there: %s", toJSON(ctrs))
	}
}

// TestClusterRefusesASandboxItDidNotMake: a Sandbox of the same name that paddock did not
// make is refused, not taken over.
func TestClusterRefusesASandboxItDidNotMake(t *testing.T) {
	r, _ := onCluster(t)
	id := runner.NewID()
	dc := testkube.Shared(t).Dynamic
	foreign := map[string]any{
		"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
		"metadata": map[string]any{"name": id, "namespace": testNS},
		"spec": map[string]any{"operatingMode": "Suspended", "podTemplate": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "x", "image": kubetest.Image}}}}},
	}
	if _, err := dc.Resource(testkube.SandboxGVR).Namespace(testNS).Create(context.Background(), &unstructured.Unstructured{Object: foreign}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer dc.Resource(testkube.SandboxGVR).Namespace(testNS).Delete(context.Background(), id, metav1.DeleteOptions{})
	_, err := r.Create(context.Background(), runner.Spec{ID: id, User: "conf", Persistent: true})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "did not make") {
		t.Fatalf("err %v, want a refusal", err)
	}
}

// TestClusterFailedStartLeavesNothing: a pod that cannot start (its image is not on the
// node) fails the start with the kubelet's reason, and leaves nothing on the cluster.
func TestClusterFailedStartLeavesNothing(t *testing.T) {
	_, cfg := onCluster(t)
	cfg.Cluster.Image = "paddock.local/no-such-image:1"
	r := runner.New(cfg, testenv.Logger(t))
	_, err := r.Create(context.Background(), runner.Spec{User: "conf"})
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "ErrImageNeverPull") {
		t.Fatalf("err %v, want the image's absence", err)
	}
}

// sandboxObject is sandbox id's Sandbox as the API server has it.
func sandboxObject(t *testing.T, id string) *unstructured.Unstructured {
	t.Helper()
	u, err := testkube.Shared(t).Dynamic.Resource(testkube.SandboxGVR).Namespace(testNS).Get(context.Background(), id, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestClusterShippedRBACIsEnough: the Role of deploy/kubernetes/rbac.yaml, bound as it
// ships to paddock's service account, is all the backend needs: a sandbox is created,
// answers, is lost when its pod goes, starts again, stops and is removed, with the
// control plane acting as that service account alone.
func TestClusterShippedRBACIsEnough(t *testing.T) {
	_, cfg := onCluster(t)
	c := testkube.Shared(t)
	ctx := context.Background()
	cfg, subject := asShippedRole(t, cfg, nil)
	r := runner.New(cfg, testenv.Logger(t))
	if err := r.Check(); err != nil {
		t.Fatalf("health as %s: %v", subject, err)
	}
	id := runner.NewID()
	spec := runner.Spec{ID: id, User: "conf", Persistent: true}
	sb := createOn(t, r, spec)
	defer r.RemoveWorkspace("conf", id)
	execIn(t, sb, "sh", "-c", "echo kept > note")
	if err := c.Client.CoreV1().Pods(testNS).Delete(ctx, id, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sb.Exited():
	case <-time.After(2 * time.Minute):
		t.Fatal("not marked lost")
	}
	_ = sb.Destroy(ctx)
	sb = createOn(t, r, spec)
	if got := execIn(t, sb, "cat", "note"); got != "kept\n" {
		t.Fatalf("after the restart: %q", got)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatalf("stop as %s: %v", subject, err)
	}
	if err := r.RemoveWorkspace("conf", id); err != nil {
		t.Fatalf("remove as %s: %v", subject, err)
	}
	// And nothing more: the service account cannot make pods of its own.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: kubetest.Image}}}}
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Cluster.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	as, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := as.CoreV1().Pods(testNS).Create(ctx, pod, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the service account made a pod: %v", err)
	}
}

// asShippedRole is cfg acting as the service account that deploy/kubernetes/rbac.yaml
// binds, with its Role (changed by edit, when not nil) made in the test namespace and its
// ClusterRoles and their bindings made as they ship, and that account's name.
func asShippedRole(t *testing.T, cfg runner.Config, edit func(*rbacv1.Role)) (runner.Config, string) {
	t.Helper()
	c := testkube.Shared(t)
	ctx := context.Background()
	b, err := os.ReadFile("../../deploy/kubernetes/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var subject string
	for _, doc := range strings.Split(string(b), "\n---\n") {
		switch {
		case strings.Contains(doc, "\nkind: Role\n"):
			var role rbacv1.Role
			if err := yaml.UnmarshalStrict([]byte(doc), &role); err != nil {
				t.Fatal(err)
			}
			role.Namespace = testNS
			if edit != nil {
				edit(&role)
			}
			if _, err := c.Client.RbacV1().Roles(testNS).Create(ctx, &role, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Client.RbacV1().Roles(testNS).Delete(ctx, role.Name, metav1.DeleteOptions{}) })
		case strings.Contains(doc, "\nkind: RoleBinding\n"):
			var rb rbacv1.RoleBinding
			if err := yaml.UnmarshalStrict([]byte(doc), &rb); err != nil {
				t.Fatal(err)
			}
			rb.Namespace = testNS
			if _, err := c.Client.RbacV1().RoleBindings(testNS).Create(ctx, &rb, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Client.RbacV1().RoleBindings(testNS).Delete(ctx, rb.Name, metav1.DeleteOptions{}) })
			subject = "system:serviceaccount:" + rb.Subjects[0].Namespace + ":" + rb.Subjects[0].Name
		case strings.Contains(doc, "\nkind: ClusterRole\n"):
			var cr rbacv1.ClusterRole
			if err := yaml.UnmarshalStrict([]byte(doc), &cr); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, &cr, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Client.RbacV1().ClusterRoles().Delete(ctx, cr.Name, metav1.DeleteOptions{}) })
		case strings.Contains(doc, "\nkind: ClusterRoleBinding\n"):
			var crb rbacv1.ClusterRoleBinding
			if err := yaml.UnmarshalStrict([]byte(doc), &crb); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, &crb, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Client.RbacV1().ClusterRoleBindings().Delete(ctx, crb.Name, metav1.DeleteOptions{}) })
		}
	}
	if subject == "" {
		t.Fatal("rbac.yaml binds no service account")
	}
	// The control plane's kubeconfig: the cluster's admin, acting as the service account.
	kc, err := clientcmd.LoadFromFile(cfg.Cluster.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range kc.AuthInfos {
		a.Impersonate = subject
	}
	cfg.Cluster.Kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, cfg.Cluster.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	return cfg, subject
}
