package kube

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/sandbox"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
	"github.com/paddockhq/paddock/internal/wire/podtls"
)

// Sandbox is a running sandbox on the cluster.
type Sandbox struct {
	c  *Cluster
	ID string
	// Node and PodIP are where its pod runs; podUID is that pod's.
	Node, PodIP string
	podUID      types.UID
	persistent  bool
	// name is its Sandbox object's, when that is not ID (a claimed pool member); claimed
	// says it came from the warm pool, and goes with its SandboxClaim.
	name    string
	claimed bool
	// template is the hash of the pod template paddock wrote.
	template string
	// want is the Sandbox as paddock made it, to write back over a hand-edited one.
	want *sbv1.Sandbox
	// Agent's AgentExited is closed when the sandbox is lost (its pod ended, was evicted
	// or went with its node, or its Sandbox object was edited or suspended outside
	// paddock; LastError says why) or destroyed. A lost sandbox is suspended, so that
	// nothing runs it again behind paddock's back; a start takes it back.
	sandbox.Agent

	// stopWatch ends the following of the Sandbox object (follow); watching is closed
	// when it has.
	stopWatch context.CancelFunc
	watching  chan struct{}
	// pair is the agent's certificate as last issued; renewing is closed when renew,
	// which stopWatch ends too, has returned.
	pair     podtls.Pair
	renewing chan struct{}

	mu      sync.Mutex
	lastErr string
	// nodeLost says its pod's node stopped reporting: only that node's kubelet, when it
	// returns, or the node's removal ends the pod.
	nodeLost bool
}

// obj is the name of its Sandbox object (and pod).
func (s *Sandbox) obj() string {
	if s.name != "" {
		return s.name
	}
	return s.ID
}

// checkPod looks at the sandbox's pod, as the pod informer last saw it, for what makes
// the sandbox lost, and says why it is.
func (s *Sandbox) checkPod(pod *corev1.Pod, gone bool) string {
	switch {
	case pod == nil:
		return "" // not in the cache yet: its Sandbox says what became of it
	case pod.UID != s.podUID:
		return "its pod was replaced (now " + string(pod.UID) + ")"
	case gone:
		return "its pod was deleted: " + story(pod)
	case pod.DeletionTimestamp != nil:
		return "its pod is being deleted: " + story(pod)
	case pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded:
		return "its pod ended: " + story(pod)
	case !podReady(pod):
		why, nodeLost := notReady(pod)
		if nodeLost {
			s.mu.Lock()
			s.nodeLost = true
			s.mu.Unlock()
		}
		return "its pod is no longer ready" + why + ": " + story(pod)
	}
	return ""
}

// notReady says why pod is not ready, when something did, and whether its node was
// found lost. The kubelet gives its reason (ContainersNotReady). The node lifecycle
// controller, which marks the pods of a node that stopped reporting not ready, gives none
// and leaves the containers as the kubelet last reported them: ready.
func notReady(pod *corev1.Pod) (string, bool) {
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodReady && cond.Reason != "" {
			return " (" + cond.Reason + ": " + cond.Message + ")", false
		}
	}
	if len(pod.Status.ContainerStatuses) == 0 {
		return "", false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if !cs.Ready {
			return "", false
		}
	}
	return " (its node " + pod.Spec.NodeName + " stopped reporting: the node controller found it lost)", true
}

// check looks at the live Sandbox and its pod (as the informers last saw them; gone when
// the pod was deleted) for what makes the sandbox lost.
func (s *Sandbox) check(ctx context.Context, live *sbv1.Sandbox, pod *corev1.Pod, gone bool) {
	if s.checkSandbox(ctx, live) {
		return
	}
	if why := s.checkPod(pod, gone); why != "" {
		// A change of the Sandbox may be what ended the pod, and the informers do not
		// keep the two in order: the Sandbox is read once before the pod is blamed.
		if fresh, err := s.c.sbx.Get(ctx, s.obj(), metav1.GetOptions{}); err == nil && s.checkSandbox(ctx, fresh) {
			return
		}
		s.lost(ctx, why)
		return
	}
	switch {
	case isTrue(live, sbv1.SandboxConditionFinished):
		s.lost(ctx, "its pod ended: "+s.c.podStory(s.obj()))
	case len(live.Status.PodIPs) > 0 && live.Status.PodIPs[0] != s.PodIP:
		s.lost(ctx, "its pod was replaced (now at "+live.Status.PodIPs[0]+")")
	}
}

// checkSandbox marks the sandbox lost when its Sandbox was edited or suspended outside
// paddock, and says whether it did.
func (s *Sandbox) checkSandbox(ctx context.Context, live *sbv1.Sandbox) bool {
	switch {
	case s.hash(live.Spec.PodTemplate) != s.template:
		// Never trusted: paddock's own template goes back, and the pod (which the
		// controller may already have made from the edited one) goes.
		why := "its Sandbox object's pod template was edited outside paddock: paddock wrote its own back and ended the pod"
		if err := s.c.writeBack(ctx, live, s.want); err != nil {
			why += " (writing it back failed: " + err.Error() + ")"
		}
		s.lost(ctx, why)
	case live.Spec.OperatingMode != sbv1.SandboxOperatingModeRunning:
		s.lost(ctx, "its Sandbox was set "+string(live.Spec.OperatingMode)+" outside paddock")
	default:
		return false
	}
	return true
}

// lost records why the sandbox is lost, once, and suspends its Sandbox.
func (s *Sandbox) lost(ctx context.Context, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.AgentExited:
		return
	default:
	}
	s.lastErr = "lost: " + why
	s.c.log.Warn("sandbox lost", "sandbox", s.ID, "node", s.Node, "why", why)
	if _, err := s.c.suspend(ctx, s.obj()); err != nil {
		s.c.log.Warn("suspend a lost sandbox", "sandbox", s.ID, "err", err)
	}
	close(s.AgentExited)
}

// hash is the digest check compares: of the pod spec alone for a claimed member (the
// controller relabels it), else of the whole template.
func (s *Sandbox) hash(pt sbv1.PodTemplate) string {
	if s.claimed {
		return specHash(pt)
	}
	return templateHash(pt)
}

func isTrue(sb *sbv1.Sandbox, t sbv1.ConditionType) bool {
	c := condition(sb, t)
	return c != nil && c.Status == metav1.ConditionTrue
}

// Cgroup is empty: the sandbox's cgroup is on its node, not here.
func (s *Sandbox) Cgroup() string { return "" }

// OOMKills counts what the pod's memory limit killed: the agent's count of its own
// container's, or one when the limit took the agent itself.
func (s *Sandbox) OOMKills() (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s.AgentConn != nil {
		if info, err := pb.NewAgentClient(s.AgentConn).Info(ctx, &pb.InfoRequest{}); err == nil {
			return info.GetKernelOomKills(), nil
		}
	}
	pod, _ := s.c.track().pod(s.obj())
	if pod == nil {
		return 0, fmt.Errorf("sandbox %s: its pod is gone: %w", s.ID, errdefs.ErrNotFound)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.Reason == "OOMKilled" {
			return 1, nil
		}
	}
	return 0, nil
}

// LastError is what the pod says of its end, when it has ended.
func (s *Sandbox) LastError() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastErr == "" {
		return s.c.podStory(s.obj())
	}
	return s.lastErr
}

// Destroy closes the channel and ends the pod: a persistent sandbox is suspended, its
// workspace kept on its volume for the next start (waiting for the pod to go, unless its
// node was lost); any other is deleted with its volume.
func (s *Sandbox) Destroy(ctx context.Context) error {
	if s.stopWatch != nil {
		s.stopWatch()
		<-s.watching
		<-s.renewing
	}
	s.mu.Lock()
	select {
	case <-s.AgentExited:
	default:
		close(s.AgentExited) // whatever ended it, as the other tiers' agents
	}
	s.mu.Unlock()
	err := s.CloseConn()
	s.mu.Lock()
	nodeLost := s.nodeLost
	s.mu.Unlock()
	if s.persistent && nodeLost {
		// Suspended when it was lost; its pod goes when its node returns or is removed,
		// which the next start waits for.
		_, serr := s.c.suspend(ctx, s.obj())
		return errors.Join(err, serr)
	}
	if s.persistent {
		return errors.Join(err, s.c.Suspend(ctx, s.obj()))
	}
	if s.claimed {
		return errors.Join(err, s.c.removeClaim(ctx, s.ID))
	}
	return errors.Join(err, s.c.Remove(ctx, s.ID))
}
