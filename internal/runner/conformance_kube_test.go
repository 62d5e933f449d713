//go:build kube

package runner_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/container"
	"github.com/paddockhq/paddock/internal/sandbox/kube"
	"github.com/paddockhq/paddock/internal/testenv"
	kubetest "github.com/paddockhq/paddock/internal/testenv/kube"
	"github.com/paddockhq/paddock/internal/wire"
)

// The conformance suite on a real single-node cluster (internal/testenv/kube): every
// sandbox is an agent-sandbox Sandbox whose pod runs under paddock's runc, reached over
// the pod network with mutual TLS. `go test -tags kube ./internal/runner`; the cluster is
// started once for the package and stopped by TestMain.

const (
	agentImage   = "paddock.local/agent:test"
	testNS       = "paddock-conformance"
	storageClass = "paddock-test-hostpath"
)

func init() {
	tiers = append(tiers, tierCase{name: "kubernetes", tier: wire.TierContainer, runtime: "runc", inContainer: true})
	clusterSetup["kubernetes"] = func(t *testing.T, cfg *runner.Config) { *cfg = clusterConfig(t, *cfg) }
	clusterLeft["kubernetes"] = clusterLeftovers
}

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

var (
	prepareOnce sync.Once
	prepareErr  error
)

// clusterConfig is cfg with its sandboxes on the test cluster, which is started (once) with
// the agent's image imported, the namespace and a storage class made.
func clusterConfig(t *testing.T, cfg runner.Config) runner.Config {
	t.Helper()
	c := kubetest.Shared(t)
	prepareOnce.Do(func() { prepareErr = prepareCluster(t, c) })
	if prepareErr != nil {
		t.Fatal(prepareErr)
	}
	cfg.Cluster = runner.ClusterConfig{Backend: runner.BackendKubernetes}
	cfg.Cluster.Kubeconfig, cfg.Cluster.Namespace, cfg.Cluster.Image = c.Kubeconfig, testNS, agentImage
	cfg.Cluster.ImagePullPolicy, cfg.Cluster.NodeUsr, cfg.Cluster.StorageClass = corev1.PullNever, true, storageClass
	cfg.Cluster.ReadyTimeout = 3 * time.Minute
	cfg, err := runner.LoadConfigFrom(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// prepareCluster imports the agent's image (the curated root, the agent and its
// trampoline; /usr is the node's) and makes the namespace and the storage class.
func prepareCluster(t *testing.T, c *kubetest.Cluster) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root := t.TempDir()
	if err := container.ImageRootfs(filepath.Join(root, "rootfs"), 1000, 1000); err != nil {
		return err
	}
	agent := testenv.Binary(t, "paddock-agent")
	files := map[string]string{wire.AgentPath: agent}
	if exec := filepath.Join(filepath.Dir(agent), "paddock-exec"); fileExists(exec) {
		files[wire.TrampolinePath] = exec
	}
	if err := c.ImportImage(ctx, kubetest.Image{Ref: agentImage, Rootfs: filepath.Join(root, "rootfs"), Files: files}); err != nil {
		return err
	}
	cs := adminClient(t, c.Kubeconfig)
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	// The in-tree hostPath provisioner (the controller-manager's
	// --enable-hostpath-provisioner): a real dynamic provisioner for a single node.
	del := corev1.PersistentVolumeReclaimDelete
	_, err = cs.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: storageClass}, Provisioner: "kubernetes.io/host-path", ReclaimPolicy: &del,
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func adminClient(t *testing.T, kubeconfig string) *kubernetes.Clientset {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// clusterLeftovers lists what paddock left in the test namespace.
func clusterLeftovers(t *testing.T) []string {
	t.Helper()
	c := kubetest.Shared(t)
	kc := kube.Config{Kubeconfig: c.Kubeconfig, Namespace: testNS, Image: agentImage}
	kc.Fill(t.TempDir())
	cl, err := kube.Open(kc, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	left, err := cl.Leftovers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return left
}
