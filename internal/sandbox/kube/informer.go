package kube

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	sbversioned "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"
	sbinformers "sigs.k8s.io/agent-sandbox/clients/k8s/informers/externalversions"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// tracker follows every Sandbox paddock made in the namespace, and every pod of them,
// through two shared informers: one list and one watch on Sandboxes and one on pods for
// all of them, however many run. Each sandbox, and each wait on one, subscribes to its
// name (its Sandbox's, which its pod shares) and reads the informers' caches when told
// that its Sandbox or its pod changed. When the API server is unreachable the caches keep
// the last state they saw (nothing is lost for want of news), and the informers list
// again and resume watching when the server returns, so what changed meanwhile arrives
// then.
type tracker struct {
	informer cache.SharedIndexInformer
	pods     cache.SharedIndexInformer
	ns       string
	synced   chan struct{} // closed once the first lists are in the caches

	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
	// gone is the last state of each deleted pod that has a subscriber, so that what a
	// deleted or evicted pod said of its end is still known when its sandbox looks.
	gone map[string]*corev1.Pod
}

// newTracker starts the informers on Sandboxes and pods labelled as paddock's in ns; they
// run until ctx ends.
func newTracker(ctx context.Context, client sbversioned.Interface, core corev1client.CoreV1Interface, ns string, c *Cluster) *tracker {
	sel := LabelManagedBy + "=" + ManagedBy
	factory := sbinformers.NewSharedInformerFactoryWithOptions(client, 0,
		sbinformers.WithNamespace(ns),
		sbinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel }))
	pods := core.Pods(ns)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return pods.Watch(ctx, o)
		},
	}
	t := &tracker{
		informer: factory.Agents().V1beta1().Sandboxes().Informer(),
		pods:     cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{}),
		ns:       ns, synced: make(chan struct{}), subs: map[string]map[chan struct{}]struct{}{}, gone: map[string]*corev1.Pod{},
	}
	// What the checks read of a pod is its status and a few fields: the managed fields
	// are dropped from the cache.
	_ = t.pods.SetTransform(func(obj any) (any, error) {
		if m, err := meta.Accessor(obj); err == nil {
			m.SetManagedFields(nil)
		}
		return obj, nil
	})
	for what, inf := range map[string]cache.SharedIndexInformer{"Sandboxes": t.informer, "pods": t.pods} {
		_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			c.log.Warn("the watch on paddock's "+what+" broke; listing again", "namespace", ns, "err", c.apiError("watch "+strings.ToLower(what), err))
		})
	}
	_, _ = t.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    t.changed,
		UpdateFunc: func(_, obj any) { t.changed(obj) },
		DeleteFunc: t.changed,
	})
	_, _ = t.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    t.changed,
		UpdateFunc: func(_, obj any) { t.changed(obj) },
		DeleteFunc: t.podDeleted,
	})
	factory.Start(ctx.Done())
	go t.pods.RunWithContext(ctx)
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), t.informer.HasSynced, t.pods.HasSynced) {
			close(t.synced)
		}
	}()
	return t
}

// changed tells the subscribers of a Sandbox or pod that it changed.
func (t *tracker) changed(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if m, err := meta.Accessor(obj); err == nil {
		t.notify(m.GetName())
	}
}

// podDeleted keeps a deleted pod's last state for its subscribers, and tells them.
func (t *tracker) podDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	t.mu.Lock()
	if t.subs[pod.Name] != nil {
		t.gone[pod.Name] = pod
	}
	t.mu.Unlock()
	t.notify(pod.Name)
}

// track is the cluster's tracker, started on first use.
func (c *Cluster) track() *tracker {
	c.trackOnce.Do(func() {
		ctx, stop := context.WithCancel(context.Background())
		c.stopTrack = stop
		c.tr = newTracker(ctx, c.sbxAll, c.core, c.cfg.Namespace, c)
	})
	return c.tr
}

// Close stops the shared informer, if it runs. The sandboxes it followed are followed no
// more; their pods run on.
func (c *Cluster) Close() {
	c.trackOnce.Do(func() {})
	if c.stopTrack != nil {
		c.stopTrack()
	}
}

func (t *tracker) notify(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for ch := range t.subs[name] {
		select {
		case ch <- struct{}{}:
		default: // one pending word is enough: the reader takes the latest from the cache
		}
	}
}

// subscribe returns a channel that gets a word whenever Sandbox name changes (as seen by
// the informer), and the function that ends the subscription.
func (t *tracker) subscribe(name string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	t.mu.Lock()
	if t.subs[name] == nil {
		t.subs[name] = map[chan struct{}]struct{}{}
	}
	t.subs[name][ch] = struct{}{}
	t.mu.Unlock()
	return ch, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		delete(t.subs[name], ch)
		if len(t.subs[name]) == 0 {
			delete(t.subs, name)
			delete(t.gone, name)
		}
	}
}

// get is Sandbox name as the cache has it, and whether it has it.
func (t *tracker) get(name string) (*sbv1.Sandbox, bool) {
	obj, ok, err := t.informer.GetIndexer().GetByKey(t.ns + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	sb, ok := obj.(*sbv1.Sandbox)
	return sb, ok
}

// pod is sandbox name's pod as the cache has it; when the pod was deleted while name had
// a subscriber, its last state, with gone set.
func (t *tracker) pod(name string) (pod *corev1.Pod, gone bool) {
	obj, ok, err := t.pods.GetIndexer().GetByKey(t.ns + "/" + name)
	if err == nil && ok {
		if pod, ok := obj.(*corev1.Pod); ok {
			return pod, false
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if pod := t.gone[name]; pod != nil {
		return pod, true
	}
	return nil, false
}

// Watching is how many Sandboxes have a follower or a waiter on the shared informer.
func (c *Cluster) Watching() int {
	t := c.track()
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.subs)
}

// waitOn waits until done says Sandbox id (nil when the cache has none) is as wanted, or
// says why it never will be (a non-nil error), re-reading it from the cache whenever the
// informer sees it change and at least every poll, when poll is not zero (for done's checks of
// things other than the Sandbox). The wait starts once the cache holds the first list.
func (c *Cluster) waitOn(ctx context.Context, id string, poll time.Duration, done func(*sbv1.Sandbox) (bool, error)) error {
	t := c.track()
	ch, cancel := t.subscribe(id)
	defer cancel()
	select {
	case <-t.synced:
	case <-ctx.Done():
		return ctx.Err()
	}
	var tick <-chan time.Time
	if poll > 0 {
		tk := time.NewTicker(poll)
		defer tk.Stop()
		tick = tk.C
	}
	for {
		sb, _ := t.get(id)
		if ok, err := done(sb); ok || err != nil {
			return err
		}
		select {
		case <-ch:
		case <-tick:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// waitReady waits until sandbox id's pod is Ready with an address, made by the
// controller from paddock's write (the Sandbox at generation gen or later), or says why
// it will not be. It reads the informers' caches only: the pod's own changes wake it, so
// it neither waits for the controller to copy the pod's state into the Sandbox nor asks
// the API server, but for the node of an earlier pod on its way out (held).
func (c *Cluster) waitReady(ctx context.Context, id string, gen int64, held *heldPod) (*corev1.Pod, error) {
	var (
		last string
		pod  *corev1.Pod
		seen bool
	)
	t := c.track()
	// Polled as well as woken: a node's state (lost, tainted out-of-service) changes no
	// pod of paddock's.
	err := c.waitOn(ctx, id, 2*time.Second, func(sb *sbv1.Sandbox) (bool, error) {
		if sb == nil {
			if seen {
				return false, fmt.Errorf("sandbox %s: its Sandbox was deleted while it started: %w", id, errdefs.ErrUnavailable)
			}
			return false, nil
		}
		seen = true
		p, gone := t.pod(id)
		ready, why, stop, earlier := readyStep(sb, p, gone, gen)
		if why != "" {
			last = why
		}
		if stop {
			return false, fmt.Errorf("sandbox %s: %s: %w", id, why, errdefs.ErrUnavailable)
		}
		if earlier && !gone && p.DeletionTimestamp != nil {
			if note := held.check(ctx, p); note != "" {
				last = note
			}
		}
		pod = ready
		return ready != nil, nil
	})
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("sandbox %s did not become ready within %s (last: %s): %w", id, c.cfg.ReadyTimeout, last, errdefs.ErrUnavailable)
	}
	return pod, err
}

// readyStep judges one look at Sandbox sb and its pod p as the cache has them (gone: p
// was deleted, and is its last state), for a start that wrote the Sandbox at generation
// gen: it returns the pod once it is ready with an address; otherwise what holds the start
// (why, empty when nothing is known), whether no wait will cure it (stop), and whether p
// is an earlier start's on its way out (earlier), which says nothing of this start.
func readyStep(sb *sbv1.Sandbox, p *corev1.Pod, gone bool, gen int64) (ready *corev1.Pod, why string, stop, earlier bool) {
	cond := condition(sb, sbv1.SandboxConditionReady)
	if cond == nil || cond.ObservedGeneration < gen {
		return nil, "", false, false // the controller has not taken paddock's write yet
	}
	if cond.Status != metav1.ConditionTrue {
		why = cond.Reason + ": " + cond.Message
	}
	if p != nil && (gone || p.DeletionTimestamp != nil || !ownedBy(p, sb)) {
		return nil, why, false, true
	}
	if p == nil {
		// Not made yet, or gone. The controller makes a pod whenever a Running Sandbox has
		// none, so a Finished condition here is not this start's end: it is an earlier
		// pod's, stamped with the generation the controller read when it saw that pod end
		// (a lost node's pod, ended by its kubelet once it returns, after this start's
		// write). This start's own pod, ended, is judged once the cache holds it.
		if f := condition(sb, sbv1.SandboxConditionFinished); f != nil && f.Status == metav1.ConditionTrue {
			why = fmt.Sprintf("its last pod ended (%s); the controller has yet to make a new one", f.Reason)
		}
		return nil, why, false, false
	}
	trouble, bad := podTrouble(p)
	if bad {
		return nil, "its pod cannot start: " + trouble, true, false
	}
	if trouble != "" {
		why = trouble
	}
	if podReady(p) && p.Status.PodIP != "" {
		return p, "", false, false
	}
	return nil, why, false, false
}

// ownedBy says whether sb's controller made pod.
func ownedBy(pod *corev1.Pod, sb *sbv1.Sandbox) bool {
	ref := metav1.GetControllerOf(pod)
	return ref != nil && ref.UID == sb.UID
}

func podReady(pod *corev1.Pod) bool {
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitGone waits until Sandbox id is gone: the cache says so and the API server agrees.
func (c *Cluster) waitGone(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReadyTimeout)
	defer cancel()
	err := c.waitOn(ctx, id, 5*time.Second, func(sb *sbv1.Sandbox) (bool, error) {
		if sb != nil {
			return false, nil
		}
		_, err := c.sbx.Get(ctx, id, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("sandbox %s is still there after %s: %w", id, c.cfg.ReadyTimeout, errdefs.ErrUnavailable)
	}
	return nil
}

// waitSuspended waits until the controller says Sandbox id is Suspended (its pod gone) at
// generation gen or later.
func (c *Cluster) waitSuspended(ctx context.Context, id string, gen int64) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReadyTimeout)
	defer cancel()
	err := c.waitOn(ctx, id, 0, func(sb *sbv1.Sandbox) (bool, error) {
		if sb == nil {
			if _, err := c.sbx.Get(ctx, id, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return false, c.apiError("sandbox "+id, err)
			}
			return false, nil
		}
		cond := condition(sb, sbv1.SandboxConditionSuspended)
		return cond != nil && cond.Status == metav1.ConditionTrue && cond.ObservedGeneration >= gen, nil
	})
	if err != nil && ctx.Err() == nil {
		return err
	}
	if err != nil {
		return fmt.Errorf("sandbox %s did not suspend within %s: %w", id, c.cfg.ReadyTimeout, errdefs.ErrUnavailable)
	}
	return nil
}

// follow starts what runs beside a started sandbox until Destroy stops it: watching its
// Sandbox and, with renew (its pair is in a Secret), renewing its certificate.
func (s *Sandbox) follow(renew bool) {
	ctx, stop := context.WithCancel(context.Background())
	s.stopWatch, s.watching, s.renewing = stop, make(chan struct{}), make(chan struct{})
	go s.watch(ctx)
	if renew {
		go s.renew(ctx)
	} else {
		close(s.renewing)
	}
}

// watch follows the sandbox's Sandbox and its pod through the shared informers until it
// is lost or stopped, checking each state they see: a pod deleted, evicted or gone with
// its node is seen in the pod's own change, before the controller copies it into the
// Sandbox.
func (s *Sandbox) watch(ctx context.Context) {
	defer close(s.watching)
	t := s.c.track()
	ch, cancel := t.subscribe(s.obj())
	defer cancel()
	for {
		if live, ok := t.get(s.obj()); ok {
			pod, gone := t.pod(s.obj())
			s.check(ctx, live, pod, gone)
		} else {
			s.lost(ctx, "its Sandbox object was deleted outside paddock")
		}
		select {
		case <-s.AgentExited:
			return
		default:
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}
