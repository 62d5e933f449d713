package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/runner/kubebackend"
	"github.com/paddockhq/paddock/internal/sandbox/container"
	"github.com/paddockhq/paddock/internal/sandbox/kube"
	testkube "github.com/paddockhq/paddock/internal/testenv/kube"
	"github.com/paddockhq/paddock/internal/wire"
)

// What the Kubernetes table makes on its cluster.
const (
	kubeImage        = "paddock.local/agent:bench"
	kubeNamespace    = "paddock-bench"
	kubeStorageClass = "paddock-bench-hostpath"
)

const kubeTitle = "23. Kubernetes: warm claim, cold start and exec on the test cluster"

// KubeTable measures sandboxes on the test cluster (internal/testenv/kube): a create
// claimed from the warm pool to its first exec result, against agent-sandbox's absolute
// gates and an exec round trip; a cold create to its first exec result against a bare pod
// of the same image made through client-go; and an exec round trip on the cluster against
// the single-host container tier's (table 2's measurement). On a machine without the test
// cluster it says so instead.
func (e *Env) KubeTable(ctx context.Context, o Options) (t *Table, err error) {
	if m := testkube.Missing(); m != "" {
		return &Table{Title: kubeTitle, About: "Not run on this machine.", Rows: []Row{{Name: "warm claim → first exec", Missing: "not run: the test cluster is not installed here: " + m}}}, nil
	}
	c, err := testkube.Start(ctx, testkube.Options{})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, c.Stop()) }()
	if err := e.prepareKube(ctx, c); err != nil {
		return nil, err
	}
	cfg := e.Config
	cfg.Cluster = runner.ClusterConfig{Backend: runner.BackendKubernetes}
	cfg.Cluster.Kubeconfig, cfg.Cluster.Namespace, cfg.Cluster.Image = c.Kubeconfig, kubeNamespace, kubeImage
	cfg.Cluster.ImagePullPolicy, cfg.Cluster.NodeUsr, cfg.Cluster.StorageClass = kube.PullNever, true, kubeStorageClass
	cfg.Cluster.WarmPool = kube.WarmPool{Size: 1}
	cfg.Cluster.CADir = filepath.Join(e.Dir, "kube-ca")
	cfg.Cluster.ReadyTimeout = 3 * time.Minute
	if cfg, err = runner.LoadConfigFrom(cfg); err != nil {
		return nil, err
	}
	r := runner.New(cfg, e.log)
	kc, err := kubebackend.Of(r)
	if err != nil {
		return nil, err
	}
	if err := kc.EnsurePool(ctx, cfg.Limits); err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, kc.RemovePool(context.WithoutCancel(ctx))) }()

	// The exec baselines: a sandbox on the cluster (cold, kept), one on this host.
	onCluster, err := e.startKubeExec(ctx, r, runner.Spec{User: benchUser, Persistent: false, Limits: wire.Limits{Memory: coldMemory}})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, onCluster.Destroy(context.WithoutCancel(ctx))) }()
	onHost, err := e.StartExecSandbox(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, onHost.Destroy(context.WithoutCancel(ctx))) }()

	rec := newRecorder()
	hits, claims := 0.0, 0
	warm := func() error {
		if err := waitPoolReady(ctx, kc); err != nil {
			return err
		}
		before, _ := kc.PoolClaims()
		began := time.Now()
		s, err := e.startKubeExec(ctx, r, runner.Spec{User: benchUser})
		rec.add("warm", ms(time.Since(began)))
		if err != nil {
			return err
		}
		claims++
		if h, _ := kc.PoolClaims(); h > before {
			hits++
		}
		return s.Destroy(context.WithoutCancel(ctx))
	}
	cold := func() error {
		// Limits of its own: the pool's template does not match, so it starts cold.
		began := time.Now()
		s, err := e.startKubeExec(ctx, r, runner.Spec{User: benchUser, Limits: wire.Limits{Memory: coldMemory}})
		rec.add("cold", ms(time.Since(began)))
		if err != nil {
			return err
		}
		return s.Destroy(context.WithoutCancel(ctx))
	}
	coldPersistent := func() error {
		// A persistent sandbox keeps its workspace on a volume claim, which its start waits
		// for the cluster to provision and bind.
		spec := runner.Spec{ID: runner.NewID(), User: benchUser, Persistent: true, Limits: wire.Limits{Memory: coldMemory}}
		began := time.Now()
		s, err := e.startKubeExec(ctx, r, spec)
		rec.add("cold.persistent", ms(time.Since(began)))
		if err != nil {
			return err
		}
		return errors.Join(s.Destroy(context.WithoutCancel(ctx)), r.RemoveWorkspace(benchUser, spec.ID))
	}
	bare := func() error {
		d, err := barePod(ctx, c, coldMemory)
		rec.add("bare", ms(d))
		return err
	}
	perRound, warmup := 5, 1
	if o.Quick {
		perRound, warmup = 1, 0
	}
	execs := func() error {
		for range perRound {
			d, err := onCluster.AgentExec(ctx)
			rec.add("exec.kube", ms(d))
			if err != nil {
				return err
			}
			d, err = onHost.AgentExec(ctx)
			rec.add("exec.host", ms(d))
			if err != nil {
				return err
			}
		}
		return nil
	}
	n := min(o.N, 20)
	if err := interleave(rec, warmup, n, warm, cold, coldPersistent, bare, execs); err != nil {
		return nil, err
	}
	w, cd, cp, b := rec.summary("warm"), rec.summary("cold"), rec.summary("cold.persistent"), rec.summary("bare")
	xk, xh := rec.summary("exec.kube"), rec.summary("exec.host")
	w99 := p99(rec.series["warm"])
	return &Table{
		Title: kubeTitle,
		About: "A single-node test cluster started by the harness (internal/testenv/kube: kube-apiserver, the kubelet, containerd with paddock's runc, " +
			"the agent-sandbox controller with its extensions), the agent's image imported, volumes from the hostPath provisioner; a runner with " +
			"`runner: {backend: kubernetes, warm_pool: {size: 1}}`. Warm claim → first exec is `runner.Create` of a sandbox of the default " +
			"limits (a SandboxClaim, the pod's token checked, the sandbox's envelope and key handed over) and then `Execute(true)` on its channel, " +
			"once the pool holds a ready pod (waited for untimed). Cold start → first exec is the same with limits of its own, not persistent: " +
			"paddock reads whether a claim or a Sandbox of its ID exists, creates its Secret and its Sandbox, hands the Secret to the Sandbox, waits on its informers " +
			"until the controller's pod is Ready with an address, dials the agent over mutual TLS and runs the exec; the pod mounts the Secret, " +
			"an emptyDir workspace and /tmp, and the node's /usr. The persistent row is the same with the workspace on a volume claim. Their " +
			"baseline is a bare Pod of the same image and memory limit made through client-go, running `sleep`, with the same emptyDir " +
			"workspace and /tmp and the node's /usr (no Secret: that is paddock's), from the create to its Ready condition polled every " +
			"10 to 50 ms. The exec round trip on the cluster is `Execute(true)` over the pod network and mutual TLS " +
			"in a running cluster sandbox; its baseline is table 2's, in a container-tier sandbox on this host. Interleaved; each created " +
			"sandbox and pod is deleted untimed.",
		Rows: []Row{
			{Name: "warm claim → first exec", Unit: "ms", Summary: w, Ratio: ratio(w.P50, xk.P50) + " of exec", Target: "p50 ≤ 300 ms, p99 ≤ 500 ms",
				Met: yesNo(w.P50 <= 300 && w99 <= 500)},
			{Name: "cold start → first exec", Unit: "ms", Summary: cd, Ratio: ratio(cd.P50, b.P50), Target: "≤ 1.5× bare pod", Met: yesNo(cd.P50 <= 1.5*b.P50)},
			{Name: "cold start of a persistent sandbox (volume claim) → first exec", Unit: "ms", Summary: cp, Ratio: ratio(cp.P50, b.P50)},
			{Name: "bare pod (client-go) → Ready", Unit: "ms", Summary: b, Ratio: "1.00× (baseline)"},
			{Name: "exec round trip on the cluster", Unit: "ms", Summary: xk, Ratio: ratio(xk.P50, xh.P50), Target: "≤ 2× single host", Met: yesNo(xk.P50 <= 2*xh.P50)},
			{Name: "exec round trip, container tier on this host", Unit: "ms", Summary: xh, Ratio: "1.00× (baseline)"},
		},
		Notes: []string{
			fmt.Sprintf("p99 of warm claim → first exec: %.1f ms; %.0f of %d creates of the default limits (warm-up included) came from the pool.", w99, hits, claims),
		},
	}, nil
}

// startKubeExec creates a sandbox on the cluster through r and runs its first exec.
func (e *Env) startKubeExec(ctx context.Context, r *runner.Runner, spec runner.Spec) (*ExecSandbox, error) {
	sb, err := r.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	s := &ExecSandbox{Sandbox: sb, env: e, client: sb.Agent()}
	if _, err := s.AgentExec(ctx); err != nil {
		_ = sb.Destroy(context.WithoutCancel(ctx))
		return nil, err
	}
	return s, nil
}

func waitPoolReady(ctx context.Context, kc *kube.Cluster) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for {
		if n, err := kc.PoolReady(ctx); err == nil && n > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the warm pool did not fill: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// barePod creates a pod of the agent's image running `sleep`, with the volumes a sandbox
// that is not persistent has but its Secret (an emptyDir workspace and /tmp, the node's
// /usr), and times it to Ready: the pod started, as a cold sandbox's must be before its
// agent answers.
func barePod(ctx context.Context, c *testkube.Cluster, memory wire.Size) (time.Duration, error) {
	pods := c.Client.CoreV1().Pods(kubeNamespace)
	name := fmt.Sprintf("bare-%d", time.Now().UnixNano())
	no := false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: &no, EnableServiceLinks: &no,
			Containers: []corev1.Container{{
				Name: "bare", Image: kubeImage, ImagePullPolicy: corev1.PullNever, Command: []string{"/usr/bin/sleep", "3600"},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "usr", MountPath: "/usr", ReadOnly: true},
					{Name: "workspace", MountPath: "/workspace"},
					{Name: "tmp", MountPath: "/tmp"},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "usr", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/usr"}}},
				{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: resourceBytes(1 << 30)}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: resourceBytes(1 << 30)}}},
			},
		},
	}
	if memory > 0 {
		q := *resourceBytes(int64(memory))
		pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: q}, Requests: corev1.ResourceList{corev1.ResourceMemory: q}}
	}
	began := time.Now()
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return 0, err
	}
	defer func() {
		zero := int64(0)
		_ = pods.Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}()
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for i := 1; ; i++ {
		p, err := pods.Get(wctx, name, metav1.GetOptions{})
		if err == nil {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					return time.Since(began), nil
				}
			}
			if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
				return 0, fmt.Errorf("bare pod %s ended: %s", name, p.Status.Message)
			}
		}
		select {
		case <-wctx.Done():
			return 0, fmt.Errorf("bare pod %s: not done: %w", name, wctx.Err())
		case <-time.After(min(10*time.Millisecond*time.Duration(i), 50*time.Millisecond)):
		}
	}
}

// prepareKube imports the agent's image and makes the table's namespace and storage class.
func (e *Env) prepareKube(ctx context.Context, c *testkube.Cluster) error {
	root := filepath.Join(e.Dir, "kube-image")
	if err := container.ImageRootfs(filepath.Join(root, "rootfs"), 1000, 1000); err != nil {
		return err
	}
	defer os.RemoveAll(root)
	files := map[string]string{wire.AgentPath: e.Agent}
	if exec := filepath.Join(filepath.Dir(e.Agent), "paddock-exec"); fileExists(exec) {
		files[wire.TrampolinePath] = exec
	}
	if err := c.ImportImage(ctx, testkube.Image{Ref: kubeImage, Rootfs: filepath.Join(root, "rootfs"), Files: files}); err != nil {
		return err
	}
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kubeNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	del := corev1.PersistentVolumeReclaimDelete
	_, err = c.Client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: kubeStorageClass}, Provisioner: "kubernetes.io/host-path", ReclaimPolicy: &del,
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

func resourceBytes(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.BinarySI) }

// coldMemory is the cold sandboxes' memory limit (and the bare pod's): not the runner's
// default, so that the pool's template does not match them.
const coldMemory = 512 << 20
