//go:build kube

package runner_test

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/runner/kubebackend"
	"github.com/paddockhq/paddock/internal/sandbox/kube"
	"github.com/paddockhq/paddock/internal/sandbox/kube/kubetest"
	"github.com/paddockhq/paddock/internal/sandbox/kubespec"
	"github.com/paddockhq/paddock/internal/testenv"
	testkube "github.com/paddockhq/paddock/internal/testenv/kube"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
	"github.com/paddockhq/paddock/internal/wire/channel"
)

// warmNS holds the pool tests' sandboxes, apart from the other tests' namespace, whose
// leftovers they count.
const warmNS = "paddock-warm"

var claimGVR = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxclaims"}

// withPool is a runner on the test cluster with a warm pool of size, filled.
func withPool(t *testing.T, size int) (*runner.Runner, *kube.Cluster, runner.Config) {
	t.Helper()
	testenv.RequireRoot(t)
	cfg := kubetest.Config(t, testenv.Config(t))
	kc := testkube.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	t.Cleanup(cancel)
	_, err := kc.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: warmNS}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cfg.Cluster.Namespace = warmNS
	cfg.Cluster.WarmPool = kube.WarmPool{Size: size}
	r := runner.New(cfg, testenv.Logger(t))
	c, err := kubebackend.Of(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.EnsurePool(ctx, cfg.Limits); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.RemovePool(context.Background()); err != nil {
			t.Errorf("remove the pool: %v", err)
		}
	})
	waitPool(t, c, size)
	return r, c, cfg
}

// waitPool waits until the pool holds n ready members.
func waitPool(t *testing.T, c *kube.Cluster, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for {
		got, err := c.PoolReady(ctx)
		if err == nil && got >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the pool has %d ready members, want %d: %v", got, n, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// claimOf is the SandboxClaim paddock made for sandbox id, and the member it got.
func claimOf(t *testing.T, id string) (member string, podIPs []string) {
	t.Helper()
	u, err := testkube.Shared(t).Dynamic.Resource(claimGVR).Namespace(warmNS).Get(context.Background(), id, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the claim of %s: %v", id, err)
	}
	member, _, _ = unstructured.NestedString(u.Object, "status", "sandbox", "name")
	podIPs, _, _ = unstructured.NestedStringSlice(u.Object, "status", "sandbox", "podIPs")
	if member == "" {
		t.Fatalf("the claim of %s names no member", id)
	}
	return member, podIPs
}

func launchType(t *testing.T, name string) string {
	t.Helper()
	u, err := testkube.Shared(t).Dynamic.Resource(testkube.SandboxGVR).Namespace(warmNS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return u.GetLabels()["agents.x-k8s.io/launch-type"]
}

// TestClusterWarmClaim: with a warm pool, a new sandbox is a claimed pool member (a hit,
// its SandboxClaim naming a warm Sandbox) that runs commands and keeps files as a cold
// one does; destroying it deletes the claim and the member.
func TestClusterWarmClaim(t *testing.T) {
	r, c, _ := withPool(t, 1)
	sb := createOn(t, r, runner.Spec{User: "conf"})
	if hits, misses := c.PoolClaims(); hits != 1 || misses != 0 {
		t.Fatalf("pool hits %v misses %v, want 1 and 0", hits, misses)
	}
	member, _ := claimOf(t, sb.ID)
	if lt := launchType(t, member); lt != "warm" {
		t.Fatalf("the claimed Sandbox %s is %q, want warm", member, lt)
	}
	if got := execIn(t, sb, "sh", "-c", "id -u; pwd; echo hi > f; cat f"); got != "1000\n/workspace\nhi\n" {
		t.Fatalf("exec: %q", got)
	}
	info, err := sb.Agent().Info(context.Background())
	if err != nil || info.GetSandboxId() != sb.ID {
		t.Fatalf("the claimed agent says it is %q (%v), want %s", info.GetSandboxId(), err, sb.ID)
	}
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := testkube.Shared(t).Dynamic.Resource(claimGVR).Namespace(warmNS).Get(context.Background(), sb.ID, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the claim is still there after Destroy: %v", err)
	}
	if _, err := testkube.Shared(t).Dynamic.Resource(testkube.SandboxGVR).Namespace(warmNS).Get(context.Background(), member, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the member %s is still there after Destroy: %v", member, err)
	}
}

// TestClusterWarmConcurrentClaims: two creates at once get two different members.
func TestClusterWarmConcurrentClaims(t *testing.T) {
	r, c, _ := withPool(t, 2)
	var wg sync.WaitGroup
	sbs := make([]*runner.Sandbox, 2)
	for i := range sbs {
		wg.Go(func() { sbs[i] = createOn(t, r, runner.Spec{User: "conf"}) })
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, sb := range sbs {
			if sb != nil {
				_ = sb.Destroy(context.Background())
			}
		}
	})
	if sbs[0] == nil || sbs[1] == nil {
		t.FailNow()
	}
	if hits, _ := c.PoolClaims(); hits != 2 {
		t.Fatalf("pool hits %v, want 2", hits)
	}
	a, _ := claimOf(t, sbs[0].ID)
	b, _ := claimOf(t, sbs[1].ID)
	if a == b {
		t.Fatalf("both sandboxes got member %s", a)
	}
	for _, sb := range sbs {
		if got := execIn(t, sb, "sh", "-c", "echo $PWD"); got != "/workspace\n" {
			t.Fatalf("exec in %s: %q", sb.ID, got)
		}
	}
}

// TestClusterWarmDeadMemberNotHandedOut: a member whose agent died while idle is never
// the pod a create gets.
func TestClusterWarmDeadMemberNotHandedOut(t *testing.T) {
	r, c, _ := withPool(t, 1)
	kc := testkube.Shared(t)
	pods, err := kc.Client.CoreV1().Pods(warmNS).List(context.Background(), metav1.ListOptions{LabelSelector: kube.LabelPool + "=" + kube.PoolName + ",agents.x-k8s.io/warm-pool-sandbox"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("%d pool pods (%v), want 1", len(pods.Items), err)
	}
	dead := pods.Items[0]
	killAgent(t, string(dead.UID))
	sb := createOn(t, r, runner.Spec{User: "conf"})
	defer sb.Destroy(context.Background())
	if got := execIn(t, sb, "sh", "-c", "echo ok"); got != "ok\n" {
		t.Fatalf("exec: %q", got)
	}
	hits, misses := c.PoolClaims()
	t.Logf("pool hits %v, misses %v", hits, misses)
	pod := sb.ID
	if hits > 0 {
		pod, _ = claimOf(t, sb.ID)
	}
	p, err := kc.Client.CoreV1().Pods(warmNS).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.UID == dead.UID {
		t.Fatalf("the sandbox runs in the pool pod whose agent was killed (%s)", dead.Name)
	}
}

// killAgent kills the agent of the pod with uid, from the host, as a crash would.
func killAgent(t *testing.T, uid string) {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*")
	killed := 0
	for _, p := range procs {
		cg, err := os.ReadFile(filepath.Join(p, "cgroup"))
		if err != nil || (!strings.Contains(string(cg), uid) && !strings.Contains(string(cg), strings.ReplaceAll(uid, "-", "_"))) {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join(p, "cmdline"))
		if !strings.Contains(string(cmd), wire.PodWarmFlag) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(p))
		proc, err := os.FindProcess(pid)
		if err == nil && proc.Kill() == nil {
			killed++
		}
	}
	if killed == 0 {
		t.Fatalf("no warm agent found in pod %s", uid)
	}
}

// TestClusterWarmIdentity: a warm pod cannot answer for another: its token names its own
// pod, which the claim check refuses for any other member; and once claimed, a member
// answers only as its sandbox.
func TestClusterWarmIdentity(t *testing.T) {
	r, c, cfg := withPool(t, 2)
	kc := testkube.Shared(t)
	pods, err := kc.Client.CoreV1().Pods(warmNS).List(context.Background(), metav1.ListOptions{LabelSelector: kube.LabelPool + "=" + kube.PoolName + ",agents.x-k8s.io/warm-pool-sandbox"})
	if err != nil || len(pods.Items) != 2 {
		t.Fatalf("%d pool pods (%v), want 2", len(pods.Items), err)
	}
	a, b := pods.Items[0], pods.Items[1]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tokB, err := c.WarmIdentity(ctx, b.Status.PodIP)
	if err != nil {
		t.Fatalf("B's identity: %v", err)
	}
	if err := c.VerifyMember(ctx, tokB, &b); err != nil {
		t.Fatalf("B's token for B: %v", err)
	}
	if err := c.VerifyMember(ctx, tokB, &a); err == nil {
		t.Fatal("B's token passed as member A's")
	}
	if err := c.VerifyMember(ctx, []byte("not.a.token"), &a); err == nil {
		t.Fatal("a made-up token passed")
	}

	x := createOn(t, r, runner.Spec{User: "conf"})
	defer x.Destroy(context.Background())
	y := createOn(t, r, runner.Spec{User: "conf"})
	defer y.Destroy(context.Background())
	_, ips := claimOf(t, x.ID)
	ca, err := kube.LoadCA(cfg.Cluster.CADir)
	if err != nil {
		t.Fatal(err)
	}
	cp, _ := ca.IssueControlPlane()
	addr := net.JoinHostPort(ips[0], strconv.Itoa(wire.PodAgentPort))
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
	asX, _ := ca.ClientConfig(cp, x.ID)
	if err := call(asX); err != nil {
		t.Fatalf("the control plane reaching X at %s: %v", addr, err)
	}
	asY, _ := ca.ClientConfig(cp, y.ID)
	if err := call(asY); err == nil {
		t.Fatal("X's claimed pod answered as Y")
	}
	if _, err := c.WarmIdentity(ctx, ips[0]); err == nil {
		t.Fatal("a claimed pod still serves the claim handshake")
	}
}

// TestClusterWarmPersistent: a persistent sandbox claimed from the pool stops (its member
// suspended, its volume kept) and starts again on the same member with its workspace,
// without another claim; removing it deletes the claim and the member.
func TestClusterWarmPersistent(t *testing.T) {
	r, c, _ := withPool(t, 1)
	id := runner.NewID()
	spec := runner.Spec{ID: id, User: "conf", Persistent: true}
	sb := createOn(t, r, spec)
	if hits, _ := c.PoolClaims(); hits != 1 {
		t.Fatalf("pool hits %v, want 1", hits)
	}
	member, _ := claimOf(t, id)
	execIn(t, sb, "sh", "-c", "echo kept > note")
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatalf("stop: %v", err)
	}
	u, err := testkube.Shared(t).Dynamic.Resource(testkube.SandboxGVR).Namespace(warmNS).Get(context.Background(), member, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if mode, _, _ := unstructured.NestedString(u.Object, "spec", "operatingMode"); mode != "Suspended" {
		t.Fatalf("the member's operatingMode after stop: %q", mode)
	}
	sb = createOn(t, r, spec)
	if got := execIn(t, sb, "cat", "note"); got != "kept\n" {
		t.Fatalf("after the restart: %q", got)
	}
	if again, _ := claimOf(t, id); again != member {
		t.Fatalf("restarted on %s, want its member %s", again, member)
	}
	if hits, misses := c.PoolClaims(); hits != 1 || misses != 0 {
		t.Fatalf("pool hits %v misses %v after the restart, want 1 and 0", hits, misses)
	}
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := r.RemoveWorkspace("conf", id); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if _, err := testkube.Shared(t).Dynamic.Resource(testkube.SandboxGVR).Namespace(warmNS).Get(context.Background(), member, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the member %s is still there after remove: %v", member, err)
	}
}

// testRuntimeClass stands for gVisor's RuntimeClass in the pools' tests: the test
// cluster's containerd has the runc handler alone, so it names that one.
const testRuntimeClass = "paddock-test-runsc"

// withPools is a runner on the test cluster with pools (runner.warm_pool.pools) and no
// default pool, made and filled; runtime runsc is testRuntimeClass.
func withPools(t *testing.T, pools ...kubespec.PoolSpec) (*runner.Runner, *kube.Cluster, runner.Config) {
	t.Helper()
	r, c, cfg := poolRunner(t, kube.WarmPool{Pools: pools}, "", "")
	t.Cleanup(func() {
		if err := c.RemovePool(context.Background()); err != nil {
			t.Errorf("remove the pools: %v", err)
		}
	})
	for _, p := range pools {
		waitPoolOf(t, c, kube.WarmPoolName(p.Key(cfg.Limits)), p.Size)
	}
	return r, c, cfg
}

// poolRunner is a runner on the test cluster in warmNS with warm pool w, as replica
// (empty: the only one), its channel's CA in caDir (empty: its own), its pools made but
// not waited for; runtime runsc is testRuntimeClass.
func poolRunner(t *testing.T, w kube.WarmPool, replica, caDir string) (*runner.Runner, *kube.Cluster, runner.Config) {
	t.Helper()
	testenv.RequireRoot(t)
	cfg := kubetest.Config(t, testenv.Config(t))
	kc := testkube.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	t.Cleanup(cancel)
	_, err := kc.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: warmNS}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, err = kc.Client.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: testRuntimeClass}, Handler: "runc"}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cfg.Cluster.Namespace = warmNS
	cfg.Cluster.RuntimeClasses = map[string]string{"runsc": testRuntimeClass}
	cfg.Cluster.WarmPool = w
	cfg.Cluster.Replica = replica
	if caDir != "" {
		cfg.Cluster.CADir = caDir
	}
	cfg, err = runner.LoadConfigFrom(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := runner.New(cfg, testenv.Logger(t))
	c, err := kubebackend.Of(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.EnsurePool(ctx, cfg.Limits); err != nil {
		t.Fatal(err)
	}
	return r, c, cfg
}

// waitPoolOf waits until the pool called name holds n ready members.
func waitPoolOf(t *testing.T, c *kube.Cluster, name string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for {
		got, err := c.PoolReadyOf(ctx, name)
		if err == nil && got >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the pool %s has %d ready members, want %d: %v", name, got, n, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// claimedPod is the pod of sandbox id's claimed member, and the pool its claim names.
func claimedPod(t *testing.T, id string) (*corev1.Pod, string) {
	t.Helper()
	u, err := testkube.Shared(t).Dynamic.Resource(claimGVR).Namespace(warmNS).Get(context.Background(), id, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the claim of %s: %v", id, err)
	}
	pool, _, _ := unstructured.NestedString(u.Object, "spec", "warmPoolRef", "name")
	member, _ := claimOf(t, id)
	if lt := launchType(t, member); lt != "warm" {
		t.Fatalf("the claimed Sandbox %s is %q, want warm", member, lt)
	}
	pod, err := testkube.Shared(t).Client.CoreV1().Pods(warmNS).Get(context.Background(), member, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod, pool
}

// TestClusterWarmPoolsByKey: with pools of other limits and of another runtime, a new
// sandbox claims from the pool whose runtime and limits are exactly its own (its claim
// names that pool, its pod is a warm member of it, with those limits or that runtime's
// class), and one no pool matches starts cold, counted as a miss of none.
func TestClusterWarmPoolsByKey(t *testing.T) {
	small := kubespec.PoolSpec{Memory: 256 << 20, Size: 1}
	gvisor := kubespec.PoolSpec{Runtime: "runsc", Size: 1}
	r, c, cfg := withPools(t, small, gvisor)
	smallPool, gvisorPool := kube.WarmPoolName(small.Key(cfg.Limits)), kube.WarmPoolName(gvisor.Key(cfg.Limits))

	a := createOn(t, r, runner.Spec{User: "conf", Limits: wire.Limits{Memory: 256 << 20}})
	defer a.Destroy(context.Background())
	pod, pool := claimedPod(t, a.ID)
	if pool != smallPool || pod.Labels[kube.LabelPool] != smallPool {
		t.Fatalf("the 256MiB sandbox claimed from %q, its pod of pool %q; want %s", pool, pod.Labels[kube.LabelPool], smallPool)
	}
	if mem := pod.Spec.Containers[0].Resources.Limits.Memory(); mem.Value() != 256<<20 {
		t.Errorf("the claimed pod's memory limit is %s, want 256Mi", mem)
	}
	if hits, misses := c.PoolClaimsOf(smallPool); hits != 1 || misses != 0 {
		t.Errorf("%s: hits %v misses %v, want 1 and 0", smallPool, hits, misses)
	}
	if got := execIn(t, a, "sh", "-c", "echo hi"); got != "hi\n" {
		t.Fatalf("exec: %q", got)
	}

	b := createOn(t, r, runner.Spec{User: "conf", Runtime: "runsc"})
	defer b.Destroy(context.Background())
	pod, pool = claimedPod(t, b.ID)
	if pool != gvisorPool || pod.Labels[kube.LabelPool] != gvisorPool {
		t.Fatalf("the runsc sandbox claimed from %q, its pod of pool %q; want %s", pool, pod.Labels[kube.LabelPool], gvisorPool)
	}
	if rc := pod.Spec.RuntimeClassName; rc == nil || *rc != testRuntimeClass {
		t.Errorf("the runsc sandbox's pod has RuntimeClass %v, want %s", rc, testRuntimeClass)
	}
	if got := execIn(t, b, "sh", "-c", "echo hi"); got != "hi\n" {
		t.Fatalf("exec: %q", got)
	}

	cold := createOn(t, r, runner.Spec{User: "conf", Limits: wire.Limits{Memory: 384 << 20}})
	defer cold.Destroy(context.Background())
	if _, err := testkube.Shared(t).Dynamic.Resource(claimGVR).Namespace(warmNS).Get(context.Background(), cold.ID, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a sandbox no pool matches has a claim: %v", err)
	}
	if hits, misses := c.PoolClaimsOf("none"); hits != 0 || misses != 1 {
		t.Errorf("none: hits %v misses %v, want 0 and 1", hits, misses)
	}
	if got := execIn(t, cold, "sh", "-c", "echo hi"); got != "hi\n" {
		t.Fatalf("exec: %q", got)
	}
}

var (
	warmPoolGVR     = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxwarmpools"}
	poolTemplateGVR = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxtemplates"}
)

// poolObject is the SandboxWarmPool (or, with gvr, the SandboxTemplate) called name in
// namespace ns, nil when there is none or it is being deleted.
func poolObject(t *testing.T, gvr schema.GroupVersionResource, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u, err := testkube.Shared(t).Dynamic.Resource(gvr).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	if u.GetDeletionTimestamp() != nil {
		return nil
	}
	return u
}

// deletePoolsAfter deletes the pools called names (and their templates) in warmNS when
// the test ends.
func deletePoolsAfter(t *testing.T, names ...string) {
	t.Cleanup(func() {
		for _, n := range names {
			for _, gvr := range []schema.GroupVersionResource{warmPoolGVR, poolTemplateGVR} {
				err := testkube.Shared(t).Dynamic.Resource(gvr).Namespace(warmNS).Delete(context.Background(), n, metav1.DeleteOptions{})
				if err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("delete %s %s: %v", gvr.Resource, n, err)
				}
			}
		}
	})
}

// TestClusterWarmPoolKeyIsThePod: a pool's key is what shapes its pods. A sandbox whose
// pids and file size are not the defaults claims a member of the default pool (the
// claim's envelope carries them) and its commands run under its own limits; one with a
// tmp of its own is handed no default member, and a pool configured with that tmp
// serves it, its pod's /tmp that size in memory.
func TestClusterWarmPoolKeyIsThePod(t *testing.T) {
	tmp := kubespec.PoolSpec{Tmp: 64 << 20, Size: 1}
	r, rc, cfg := poolRunner(t, kube.WarmPool{Size: 1, Pools: []kubespec.PoolSpec{tmp}}, "", "")
	tmpPool := kube.WarmPoolName(tmp.Key(cfg.Limits))
	t.Cleanup(func() {
		if err := rc.RemovePool(context.Background()); err != nil {
			t.Errorf("remove the pools: %v", err)
		}
	})
	waitPool(t, rc, 1)
	waitPoolOf(t, rc, tmpPool, 1)

	own := createOn(t, r, runner.Spec{User: "conf", Limits: wire.Limits{Pids: 77, FileSize: 3 << 20}})
	defer own.Destroy(context.Background())
	if pod, pool := claimedPod(t, own.ID); pool != kube.PoolName || pod.Labels[kube.LabelPool] != kube.PoolName {
		t.Fatalf("the sandbox of its own pids claimed from %q, want %s", pool, kube.PoolName)
	}
	if hits, misses := rc.PoolClaims(); hits != 1 || misses != 0 {
		t.Errorf("%s: hits %v misses %v, want 1 and 0", kube.PoolName, hits, misses)
	}
	got := execIn(t, own, "sh", "-c", "grep -E '^Max (processes|file size)' /proc/self/limits | tr -s ' '")
	if !strings.Contains(got, "Max file size 3145728 3145728") || !strings.Contains(got, "Max processes 77 77") {
		t.Fatalf("the claimed sandbox's commands run under:\n%s\nwant its own pids (77) and file size (3MiB)", got)
	}

	small := createOn(t, r, runner.Spec{User: "conf", Limits: wire.Limits{Tmp: 64 << 20}})
	defer small.Destroy(context.Background())
	pod, pool := claimedPod(t, small.ID)
	if pool != tmpPool || pod.Labels[kube.LabelPool] != tmpPool {
		t.Fatalf("the sandbox of tmp 64MiB claimed from %q, its pod of pool %q; want %s", pool, pod.Labels[kube.LabelPool], tmpPool)
	}
	for _, v := range pod.Spec.Volumes {
		if e := v.EmptyDir; v.Name == "tmp" && (e == nil || e.Medium != corev1.StorageMediumMemory || e.SizeLimit == nil || e.SizeLimit.Value() != 64<<20) {
			t.Errorf("the claimed pod's /tmp is %+v, want 64Mi in memory", e)
		}
	}
	if hits, _ := rc.PoolClaims(); hits != 1 {
		t.Errorf("the default pool was claimed %v times, want once: a tmp of its own took a default member", hits)
	}
}

// TestClusterWarmPoolsNoLongerConfigured: a runner whose configuration no longer has a
// pool deletes it (its SandboxWarmPool and SandboxTemplate) when it starts, and none that
// is not paddock's or not in its namespace. Replicas mark the pools they have: a pool
// that replica a drops stays while replica b has it, and goes when b drops it too.
func TestClusterWarmPoolsNoLongerConfigured(t *testing.T) {
	gone := kubespec.PoolSpec{Memory: 256 << 20, Size: 1}
	_, _, cfg := poolRunner(t, kube.WarmPool{Pools: []kubespec.PoolSpec{gone}}, "", "")
	goneName := kube.WarmPoolName(gone.Key(cfg.Limits))
	shared := kubespec.PoolSpec{Memory: 320 << 20, Size: 1}
	sharedName := kube.WarmPoolName(shared.Key(cfg.Limits))
	deletePoolsAfter(t, goneName, sharedName, kube.PoolName, "paddock-warm-foreign")
	if poolObject(t, warmPoolGVR, warmNS, goneName) == nil {
		t.Fatalf("the pool %s was not made", goneName)
	}
	// Another's pool in the namespace, and a pool of paddock's in another namespace.
	kc := testkube.Shared(t)
	foreign := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool",
		"metadata": map[string]any{"name": "paddock-warm-foreign"},
		"spec":     map[string]any{"replicas": int64(0), "sandboxTemplateRef": map[string]any{"name": "none"}},
	}}
	if _, err := kc.Dynamic.Resource(warmPoolGVR).Namespace(warmNS).Create(context.Background(), foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	elsewhere := foreign.DeepCopy()
	elsewhere.SetName("paddock-warm-elsewhere")
	elsewhere.SetLabels(map[string]string{kube.LabelManagedBy: kube.ManagedBy, kube.LabelPool: "paddock-warm-elsewhere"})
	if _, err := kc.Dynamic.Resource(warmPoolGVR).Namespace(kubetest.Namespace).Create(context.Background(), elsewhere, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kc.Dynamic.Resource(warmPoolGVR).Namespace(kubetest.Namespace).Delete(context.Background(), "paddock-warm-elsewhere", metav1.DeleteOptions{})
	})

	poolRunner(t, kube.WarmPool{Size: 1}, "", "")
	if poolObject(t, warmPoolGVR, warmNS, goneName) != nil || poolObject(t, poolTemplateGVR, warmNS, goneName) != nil {
		t.Fatalf("the pool %s taken out of the configuration is still there", goneName)
	}
	if poolObject(t, warmPoolGVR, warmNS, kube.PoolName) == nil {
		t.Fatalf("the configured pool %s was deleted", kube.PoolName)
	}
	if poolObject(t, warmPoolGVR, warmNS, "paddock-warm-foreign") == nil || poolObject(t, warmPoolGVR, kubetest.Namespace, "paddock-warm-elsewhere") == nil {
		t.Fatal("a pool not paddock's, or in another namespace, was deleted")
	}

	both := kube.WarmPool{Pools: []kubespec.PoolSpec{shared}}
	poolRunner(t, both, "a", "")
	poolRunner(t, both, "b", "")
	if u := poolObject(t, warmPoolGVR, warmNS, sharedName); u == nil || !slices.Equal(kube.ReplicaMarks(u.GetAnnotations()), []string{"a", "b"}) {
		t.Fatalf("the pool both replicas have: %v, want it marked by a and b", u)
	}
	poolRunner(t, kube.WarmPool{}, "a", "")
	u := poolObject(t, warmPoolGVR, warmNS, sharedName)
	if u == nil {
		t.Fatal("replica a deleted the pool replica b still has")
	}
	if marks := kube.ReplicaMarks(u.GetAnnotations()); !slices.Equal(marks, []string{"b"}) {
		t.Fatalf("the pool's marks after a dropped it: %v, want b's alone", marks)
	}
	poolRunner(t, kube.WarmPool{}, "b", "")
	if poolObject(t, warmPoolGVR, warmNS, sharedName) != nil {
		t.Fatal("the pool no replica has is still there")
	}
}

// TestClusterReapOnlyThisReplicasMembers: two replicas ready a member each of one template
// pool; replica a, started again, deletes the member it left and not b's, which still
// runs commands. Once the template is out of both replicas' configurations, its pool is
// deleted, and b's claimed member still runs.
func TestClusterReapOnlyThisReplicasMembers(t *testing.T) {
	ca := t.TempDir()
	ra, ca1, _ := poolRunner(t, kube.WarmPool{}, "a", ca)
	rb, _, _ := poolRunner(t, kube.WarmPool{}, "b", ca)
	t.Cleanup(func() {
		if err := ca1.RemoveTemplatePool(context.Background(), "t21"); err != nil {
			t.Errorf("remove the template pool: %v", err)
		}
	})
	spec := runner.Spec{Pool: true, Persistent: true, PoolTemplate: "t21", PoolSize: 2}
	spec.ID = runner.NewID()
	ma := createOn(t, ra, spec)
	defer ma.Destroy(context.Background())
	spec.ID = runner.NewID()
	mb := createOn(t, rb, spec)
	defer mb.Destroy(context.Background())
	for id, replica := range map[string]string{ma.ID: "a", mb.ID: "b"} {
		u, err := testkube.Shared(t).Dynamic.Resource(claimGVR).Namespace(warmNS).Get(context.Background(), id, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the member %s was not claimed from the pool: %v", id, err)
		}
		if got := u.GetLabels()[kube.LabelReplica]; got != replica {
			t.Fatalf("the claim of %s is labelled replica %q, want %s", id, got, replica)
		}
	}

	again, _, _ := poolRunner(t, kube.WarmPool{}, "a", ca)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := again.ReapPool(ctx, "", []string{"t21"}); err != nil {
		t.Fatal(err)
	}
	if _, err := testkube.Shared(t).Dynamic.Resource(claimGVR).Namespace(warmNS).Get(ctx, ma.ID, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("replica a's leftover member is still claimed: %v", err)
	}
	if _, err := testkube.Shared(t).Dynamic.Resource(claimGVR).Namespace(warmNS).Get(ctx, mb.ID, metav1.GetOptions{}); err != nil {
		t.Fatalf("replica a's cleanup deleted replica b's member: %v", err)
	}
	if got := execIn(t, mb, "echo", "alive"); got != "alive\n" {
		t.Fatalf("b's member after a's cleanup: %q", got)
	}
	tmplPool, _ := kube.TemplatePoolName("t21")
	if u := poolObject(t, warmPoolGVR, warmNS, tmplPool); u == nil || !slices.Equal(kube.ReplicaMarks(u.GetAnnotations()), []string{"a", "b"}) {
		t.Fatalf("the template pool both replicas have: %v, want it marked by a and b", u)
	}

	// The template taken out of pool.templates: its pool goes once neither replica has
	// it, and b's member, claimed, stays.
	if err := again.ReapPool(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	if u := poolObject(t, warmPoolGVR, warmNS, tmplPool); u == nil || !slices.Equal(kube.ReplicaMarks(u.GetAnnotations()), []string{"b"}) {
		t.Fatalf("the template pool after a dropped it: %v, want it kept, marked by b alone", u)
	}
	// b's own pruning (ReapPool would reap b's member too: at start it is a leftover).
	cb, err := kubebackend.Of(rb)
	if err != nil {
		t.Fatal(err)
	}
	if err := cb.PruneTemplatePools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if poolObject(t, warmPoolGVR, warmNS, tmplPool) != nil || poolObject(t, poolTemplateGVR, warmNS, tmplPool) != nil {
		t.Fatalf("the template pool %s no replica has is still there", tmplPool)
	}
	if got := execIn(t, mb, "echo", "alive"); got != "alive\n" {
		t.Fatalf("b's member after its pool went: %q", got)
	}
}
