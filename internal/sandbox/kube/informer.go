package kube

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	sbversioned "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"
	sbinformers "sigs.k8s.io/agent-sandbox/clients/k8s/informers/externalversions"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// tracker follows every Sandbox paddock made in the namespace through one shared
// informer: one list and one watch for all of them, however many run. Each sandbox, and
// each wait on one, subscribes to its name and reads the informer's cache when told that
// its object changed. When the API server is unreachable the cache keeps the last state
// it saw (nothing is lost for want of news), and the informer lists again and resumes
// watching when the server returns, so what changed meanwhile arrives then.
type tracker struct {
	informer cache.SharedIndexInformer
	ns       string
	synced   chan struct{} // closed once the first list is in the cache

	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
}

// newTracker starts the informer on Sandboxes labelled as paddock's in ns; it runs until
// ctx ends.
func newTracker(ctx context.Context, client sbversioned.Interface, ns string, c *Cluster) *tracker {
	factory := sbinformers.NewSharedInformerFactoryWithOptions(client, 0,
		sbinformers.WithNamespace(ns),
		sbinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LabelManagedBy + "=" + ManagedBy }))
	t := &tracker{
		informer: factory.Agents().V1beta1().Sandboxes().Informer(),
		ns:       ns, synced: make(chan struct{}), subs: map[string]map[chan struct{}]struct{}{},
	}
	_ = t.informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		c.log.Warn("the watch on paddock's Sandboxes broke; listing again", "namespace", ns, "err", c.apiError("watch sandboxes", err))
	})
	notify := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if sb, ok := obj.(*sbv1.Sandbox); ok {
			t.notify(sb.Name)
		}
	}
	_, _ = t.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, obj any) { notify(obj) },
		DeleteFunc: notify,
	})
	factory.Start(ctx.Done())
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), t.informer.HasSynced) {
			close(t.synced)
		}
	}()
	return t
}

// track is the cluster's tracker, started on first use.
func (c *Cluster) track() *tracker {
	c.trackOnce.Do(func() {
		ctx, stop := context.WithCancel(context.Background())
		c.stopTrack = stop
		c.tr = newTracker(ctx, c.sbxAll, c.cfg.Namespace, c)
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

// How soon a start that waits first looks at its pod, and how seldom at most.
const (
	podCheckFirst = 3 * time.Second
	podCheckMax   = 30 * time.Second
)

// waitReady waits until sandbox id is Ready with an address, as the controller saw it at
// generation gen or later (paddock's write, not an older state), or says why it will not
// be.
func (c *Cluster) waitReady(ctx context.Context, id string, gen int64) (*sbv1.SandboxStatus, error) {
	var (
		last   string
		status *sbv1.SandboxStatus
		seen   bool
	)
	// What holds the pod back is on the pod, not the Sandbox: looked at after a few
	// seconds of waiting, then less and less often (a thousand sandboxes starting at once
	// must not poll their pods).
	every := podCheckFirst
	podCheck := time.Now().Add(every)
	err := c.waitOn(ctx, id, time.Second, func(sb *sbv1.Sandbox) (bool, error) {
		if sb == nil {
			if seen {
				return false, fmt.Errorf("sandbox %s: its Sandbox was deleted while it started: %w", id, errdefs.ErrUnavailable)
			}
			return false, nil
		}
		seen = true
		if cond := condition(sb, sbv1.SandboxConditionReady); cond != nil && cond.ObservedGeneration >= gen {
			if cond.Status == metav1.ConditionTrue && len(sb.Status.PodIPs) > 0 {
				status = sb.Status.DeepCopy()
				return true, nil
			}
			last = cond.Reason + ": " + cond.Message
		}
		if cond := condition(sb, sbv1.SandboxConditionFinished); cond != nil && cond.Status == metav1.ConditionTrue && cond.ObservedGeneration >= gen {
			return false, fmt.Errorf("sandbox %s: its pod ended before it was ready (%s): %s: %w", id, cond.Reason, c.podStory(ctx, id), errdefs.ErrUnavailable)
		}
		if time.Now().After(podCheck) {
			every = min(2*every, podCheckMax)
			podCheck = time.Now().Add(every)
			if why, bad := c.podTrouble(ctx, id); bad {
				return false, fmt.Errorf("sandbox %s: its pod cannot start: %s: %w", id, why, errdefs.ErrUnavailable)
			} else if why != "" {
				last = why
			}
		}
		return false, nil
	})
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("sandbox %s did not become ready within %s (last: %s): %w", id, c.cfg.ReadyTimeout, last, errdefs.ErrUnavailable)
	}
	return status, err
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

// watch follows the sandbox's Sandbox through the shared informer until it is lost or
// stopped, checking each state the informer sees.
func (s *Sandbox) watch(ctx context.Context) {
	defer close(s.watching)
	t := s.c.track()
	ch, cancel := t.subscribe(s.obj())
	defer cancel()
	for {
		if live, ok := t.get(s.obj()); ok {
			s.check(ctx, live)
		} else {
			s.lost(ctx, "its Sandbox object was deleted outside paddock")
		}
		select {
		case <-s.exited:
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
