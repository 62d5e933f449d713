// Package kubetest runs paddock's sandboxes on the test cluster (internal/testenv/kube):
// Config points a runner's configuration at it, with paddock's agent image imported and
// the sandboxes' namespace and a storage class made, once per test process.
package kubetest

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

	"github.com/paddockhq/paddock/internal/runner"
	_ "github.com/paddockhq/paddock/internal/runner/kubebackend" // the runner opens the test cluster
	"github.com/paddockhq/paddock/internal/sandbox/container"
	"github.com/paddockhq/paddock/internal/sandbox/kube"
	"github.com/paddockhq/paddock/internal/testenv"
	testkube "github.com/paddockhq/paddock/internal/testenv/kube"
	"github.com/paddockhq/paddock/internal/wire"
)

// What Config makes on the cluster.
const (
	Image        = "paddock.local/agent:test"
	Namespace    = "paddock-conformance"
	StorageClass = "paddock-test-hostpath"
)

var (
	prepareOnce sync.Once
	prepareErr  error
)

// Config is cfg with its sandboxes on the test package's cluster (testkube.Shared, which
// skips the test where the machine has no cluster): the agent's image, whose /usr is the
// node's, pulled Never; a namespace of their own; volumes from the hostPath provisioner.
func Config(t *testing.T, cfg runner.Config) runner.Config {
	t.Helper()
	c := testkube.Shared(t)
	prepareOnce.Do(func() { prepareErr = prepare(t, c) })
	if prepareErr != nil {
		t.Fatal(prepareErr)
	}
	cfg.Cluster = runner.ClusterConfig{Backend: runner.BackendKubernetes}
	cfg.Cluster.Kubeconfig, cfg.Cluster.Namespace, cfg.Cluster.Image = c.Kubeconfig, Namespace, Image
	cfg.Cluster.ImagePullPolicy, cfg.Cluster.NodeUsr, cfg.Cluster.StorageClass = kube.PullNever, true, StorageClass
	cfg.Cluster.ReadyTimeout = 3 * time.Minute
	cfg, err := runner.LoadConfigFrom(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// prepare imports the agent's image (the curated root, the agent and its trampoline) and
// makes the namespace and the storage class.
func prepare(t *testing.T, c *testkube.Cluster) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, err := os.MkdirTemp("", "pdk-agent-image")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	if err := container.ImageRootfs(filepath.Join(root, "rootfs"), 1000, 1000); err != nil {
		return err
	}
	agent := testenv.Binary(t, "paddock-agent")
	files := map[string]string{wire.AgentPath: agent}
	if exec := filepath.Join(filepath.Dir(agent), "paddock-exec"); regular(exec) {
		files[wire.TrampolinePath] = exec
	}
	if err := c.ImportImage(ctx, testkube.Image{Ref: Image, Rootfs: filepath.Join(root, "rootfs"), Files: files}); err != nil {
		return err
	}
	_, err = c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	// The in-tree hostPath provisioner (the controller-manager's
	// --enable-hostpath-provisioner): a real dynamic provisioner for a single node.
	del := corev1.PersistentVolumeReclaimDelete
	_, err = c.Client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: StorageClass}, Provisioner: "kubernetes.io/host-path", ReclaimPolicy: &del,
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

func regular(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// Leftovers lists what paddock left in the namespace (kube.Cluster.Leftovers).
func Leftovers(t *testing.T) []string {
	t.Helper()
	c := testkube.Shared(t)
	kc := kube.Config{Kubeconfig: c.Kubeconfig, Namespace: Namespace, Image: Image}
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
