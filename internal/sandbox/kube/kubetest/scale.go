package kubetest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	sbversioned "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"
	sbinformers "sigs.k8s.io/agent-sandbox/clients/k8s/informers/externalversions"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/kube"
	testkube "github.com/paddockhq/paddock/internal/testenv/kube"
)

// The scale run's sandboxes live in a namespace of their own, on KWOK's simulated nodes:
// their pods are never run (no agent answers), KWOK reports them Running and Ready with an
// address as a kubelet would, and everything else (paddock's backend, the API server,
// the agent-sandbox controller, the scheduler, the volume claims' provisioning) is real.
const ScaleNamespace = "paddock-scale"

// ScaleRate is the creation rate, sandboxes a second.
const ScaleRate = 50

// PrepareScale makes the cluster ready for rounds of n sandboxes: KWOK with simulated
// nodes for twice n pods (a round's leftovers never crowd the next), the namespace and the
// storage class of the workspaces' volumes.
func PrepareScale(ctx context.Context, c *testkube.Cluster, n int) error {
	const perNode = 500
	if _, err := c.StartKWOK(ctx, max(2, (2*n+perNode-1)/perNode), perNode); err != nil {
		return err
	}
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ScaleNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	del := corev1.PersistentVolumeReclaimDelete
	_, err = c.Client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: StorageClass}, Provisioner: "kubernetes.io/host-path", ReclaimPolicy: &del,
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	// The controller is ready a moment before its watch on Sandboxes is open, and the
	// rounds count the watches against what the API server held before them.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := SandboxWatches(ctx, c)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the agent-sandbox controller does not watch Sandboxes: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ScaleConfig is the backend's configuration for sandboxes on the simulated nodes, its
// CA in dir: paddock's own objects, placed there by runner.node_selector and
// runner.tolerations.
func ScaleConfig(c *testkube.Cluster, dir string) kube.Config {
	cfg := kube.Config{
		Kubeconfig: c.Kubeconfig, Namespace: ScaleNamespace, Image: Image, ImagePullPolicy: kube.PullNever,
		StorageClass: StorageClass, NodeSelector: testkube.KWOKNodeSelector, Tolerations: []kube.Toleration{{Key: testkube.KWOKToleration.Key,
			Operator: string(testkube.KWOKToleration.Operator), Effect: string(testkube.KWOKToleration.Effect)}},
		ReadyTimeout: 5 * time.Minute,
	}
	cfg.Fill(dir)
	return cfg
}

// ScaleRound is what one round measured.
type ScaleRound struct {
	// Ready is each sandbox's time from the moment its create was due (the schedule at
	// ScaleRate, so that a client falling behind is counted, not hidden) to its Sandbox
	// seen Ready with an address.
	Ready []time.Duration
	// Watches is how many more watches on Sandboxes the API server held with every
	// sandbox of the round running than before the round; PodWatches, on pods.
	Watches, PodWatches int
}

// PaddockRound creates n sandboxes through paddock's backend (kube.Cluster.Place: the
// channel's Secret and certificate, the Sandbox, the wait on the shared informer) at
// ScaleRate, each in a goroutine of its own started when due; then destroys them all
// through the backend and waits until nothing of them is left.
func PaddockRound(ctx context.Context, c *testkube.Cluster, cfg kube.Config, n int, log *slog.Logger) (ScaleRound, error) {
	var r ScaleRound
	before, err := SandboxWatches(ctx, c)
	if err != nil {
		return r, err
	}
	podsBefore, err := Watches(ctx, c, "", "pods")
	if err != nil {
		return r, err
	}
	cl, err := kube.Open(cfg, log)
	if err != nil {
		return r, err
	}
	defer cl.Close()
	sbs := make([]*kube.Sandbox, n)
	r.Ready = make([]time.Duration, n)
	errs := make([]error, n)
	schedule(n, func(i int, due time.Time) {
		sbs[i], errs[i] = cl.Place(ctx, kube.Request{ID: runner.NewID(), UID: 1000, GID: 1000}, false)
		r.Ready[i] = time.Since(due)
	})
	err = errors.Join(errs...)
	if err == nil {
		var during int
		if during, err = SandboxWatches(ctx, c); err == nil {
			r.Watches = during - before
		}
		if during, err = Watches(ctx, c, "", "pods"); err == nil {
			r.PodWatches = during - podsBefore
		}
		for _, sb := range sbs {
			select {
			case <-sb.Exited():
				err = errors.Join(err, fmt.Errorf("sandbox %s lost while the round ran: %s", sb.ID, sb.LastError()))
			default:
			}
		}
	}
	// All at once, as the floor's: each waits out its pod's grace period.
	var wg sync.WaitGroup
	for i, sb := range sbs {
		if sb == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = sb.Destroy(ctx)
		}()
	}
	wg.Wait()
	if err = errors.Join(err, errors.Join(errs...), WaitNothingLeft(ctx, c, cfg, log)); err != nil {
		return r, fmt.Errorf("paddock round: %w", err)
	}
	return r, nil
}

// RawRound is the floor: the same Sandboxes (kube.NewSandbox's objects, without the
// Secret) created at ScaleRate straight through client-go, their readiness seen by a
// client-go informer of the harness's own; then deleted the same way.
func RawRound(ctx context.Context, c *testkube.Cluster, cfg kube.Config, n int, log *slog.Logger) (ScaleRound, error) {
	var r ScaleRound
	rc := *c.Config
	rc.QPS, rc.Burst = 200, 400 // as the backend's client
	client, err := sbversioned.NewForConfig(&rc)
	if err != nil {
		return r, err
	}
	sandboxes := client.AgentsV1beta1().Sandboxes(cfg.Namespace)
	var (
		mu    sync.Mutex
		ready = map[string]time.Time{}
		fresh = make(chan struct{}, 1)
	)
	seen := func(obj any) {
		sb, ok := obj.(*sbv1.Sandbox)
		if !ok {
			return
		}
		for _, cond := range sb.Status.Conditions {
			if cond.Type == string(sbv1.SandboxConditionReady) && cond.Status == metav1.ConditionTrue && len(sb.Status.PodIPs) > 0 {
				mu.Lock()
				if _, ok := ready[sb.Name]; !ok {
					ready[sb.Name] = time.Now()
					select {
					case fresh <- struct{}{}:
					default:
					}
				}
				mu.Unlock()
			}
		}
	}
	ictx, stop := context.WithCancel(ctx)
	defer stop()
	factory := sbinformers.NewSharedInformerFactoryWithOptions(client, 0, sbinformers.WithNamespace(cfg.Namespace),
		sbinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = kube.LabelManagedBy + "=" + kube.ManagedBy }))
	inf := factory.Agents().V1beta1().Sandboxes().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, o any) { seen(o) }})
	factory.Start(ictx.Done())
	if !cache.WaitForCacheSync(ictx.Done(), inf.HasSynced) {
		return r, fmt.Errorf("raw client-go round: the informer did not sync")
	}
	names := make([]string, n)
	dues := make([]time.Time, n)
	errs := make([]error, n)
	schedule(n, func(i int, due time.Time) {
		names[i], dues[i] = runner.NewID(), due
		want, err := kube.NewSandbox(&cfg, kube.Request{ID: names[i], UID: 1000, GID: 1000})
		if err == nil {
			_, err = sandboxes.Create(ctx, want, metav1.CreateOptions{})
		}
		errs[i] = err
	})
	err = errors.Join(errs...)
	deadline := time.After(cfg.ReadyTimeout)
	for err == nil {
		mu.Lock()
		got := len(ready)
		mu.Unlock()
		if got >= n {
			break
		}
		select {
		case <-fresh:
		case <-deadline:
			err = fmt.Errorf("raw client-go round: %d of %d Sandboxes Ready after %s", got, n, cfg.ReadyTimeout)
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if err == nil {
		mu.Lock()
		for i, name := range names {
			r.Ready = append(r.Ready, ready[name].Sub(dues[i]))
		}
		mu.Unlock()
	}
	fg := metav1.DeletePropagationForeground
	for _, name := range names {
		if name == "" {
			continue
		}
		if derr := sandboxes.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &fg}); derr != nil && !apierrors.IsNotFound(derr) {
			err = errors.Join(err, derr)
		}
	}
	if err = errors.Join(err, WaitNothingLeft(ctx, c, cfg, log)); err != nil {
		return r, fmt.Errorf("raw client-go round: %w", err)
	}
	return r, nil
}

// schedule runs f(i, due) for i in [0, n), each in its own goroutine started at its due
// time (ScaleRate a second from now), and waits for them all.
func schedule(n int, f func(i int, due time.Time)) {
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		due := start.Add(time.Duration(i) * time.Second / ScaleRate)
		time.Sleep(time.Until(due))
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i, due)
		}()
	}
	wg.Wait()
}

// WaitNothingLeft waits until nothing paddock made is left in cfg's namespace (Sandboxes,
// pods, Secrets, volume claims) and no volume bound to a claim there remains.
func WaitNothingLeft(ctx context.Context, c *testkube.Cluster, cfg kube.Config, log *slog.Logger) error {
	cl, err := kube.Open(cfg, log)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(cfg.ReadyTimeout)
	for {
		left, err := cl.Leftovers(ctx)
		if err != nil {
			return err
		}
		pvs, err := c.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, pv := range pvs.Items {
			if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == cfg.Namespace {
				left = append(left, "PersistentVolume/"+pv.Name)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s, %d objects are left in %s, among them %s", cfg.ReadyTimeout, len(left), cfg.Namespace, strings.Join(left[:min(5, len(left))], ", "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// SandboxWatches is how many watches on Sandboxes the API server holds now.
func SandboxWatches(ctx context.Context, c *testkube.Cluster) (int, error) {
	return Watches(ctx, c, "agents.x-k8s.io", "sandboxes")
}

// Watches is how many watches on resource of group ("" for the core group) the API server
// holds now (its apiserver_longrunning_requests gauge).
func Watches(ctx context.Context, c *testkube.Cluster, group, resource string) (int, error) {
	b, err := c.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("the API server's metrics: %w", err)
	}
	total, found := 0.0, false
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_longrunning_requests{") || !strings.Contains(line, `group="`+group+`"`) ||
			!strings.Contains(line, `resource="`+resource+`"`) || !strings.Contains(line, `verb="WATCH"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("the API server's metrics: %q: %w", line, err)
		}
		total, found = total+v, true
	}
	if !found {
		return 0, fmt.Errorf("the API server's metrics have no apiserver_longrunning_requests for %s", resource)
	}
	return int(total), nil
}
