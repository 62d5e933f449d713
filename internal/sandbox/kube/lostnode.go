package kube

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/paddockhq/paddock/internal/sandbox/kubespec"
)

// heldPod looks, for a start of one sandbox, at its earlier pod on its way out: only that
// pod's node's kubelet can finish its deletion, so on a lost node it holds the sandbox's
// name (and the pod's) until the node returns. It ends the wait when the node is known to
// be down (tainted out-of-service) or the operator allowed it (force_delete_lost_pods),
// by deleting the pod with no grace; otherwise it says what the operator must do.
type heldPod struct {
	c  *Cluster
	id string

	mu      sync.Mutex
	next    time.Time // no node read before then
	note    string    // what the last look found
	waiting bool      // the last look found the node lost, and only the operator can help
	warned  bool      // the operator was told once in the log
}

// onLostNode says whether the last look found the pod held by a lost node.
func (h *heldPod) onLostNode() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waiting
}

// heldEvery bounds how often a start reads the node of its held pod.
const heldEvery = 2 * time.Second

func (c *Cluster) newHeld(id string) *heldPod { return &heldPod{c: c, id: id} }

// check looks at pod's node, at most every heldEvery, deletes the pod when it may, and
// returns what holds the start (empty when nothing is known to).
func (h *heldPod) check(ctx context.Context, pod *corev1.Pod) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if pod.Spec.NodeName == "" || time.Now().Before(h.next) {
		return h.note
	}
	h.next = time.Now().Add(heldEvery)
	note, lost, waiting := h.c.lostNode(ctx, pod)
	if ctx.Err() != nil {
		return h.note // the start gave up meanwhile: what was last found stands
	}
	h.note, h.waiting = note, waiting
	if waiting && !h.warned {
		h.warned = true
		h.c.log.Warn("a sandbox's start waits for a lost node", "sandbox", h.id, "node", pod.Spec.NodeName, "what_to_do", note)
	}
	if lost == "" {
		return note
	}
	grace := int64(0)
	uid := pod.UID
	err := h.c.core.Pods(h.c.cfg.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		h.note = fmt.Sprintf("its earlier pod is held by node %s, %s, and paddock could not delete it: %v", pod.Spec.NodeName, lost, h.c.apiError("delete pod "+pod.Name, err))
		return h.note
	}
	h.c.log.Warn("force-deleted the pod of a sandbox held by a lost node: the sandbox starts on another node",
		"sandbox", h.id, "node", pod.Spec.NodeName, "why", lost)
	h.note = fmt.Sprintf("its earlier pod on node %s (%s) was force-deleted", pod.Spec.NodeName, lost)
	return h.note
}

// lostNode reads pod's node. It returns what holds the pod there; when paddock may
// force-delete the pod, why (the node tainted out-of-service, or lost past
// node_lost_after with force_delete_lost_pods set); and whether the node is lost and only
// the operator can end the wait.
func (c *Cluster) lostNode(ctx context.Context, pod *corev1.Pod) (note, lost string, waiting bool) {
	name := pod.Spec.NodeName
	node, err := c.core.Nodes().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("its earlier pod was on node %s, which is gone: Kubernetes deletes its pods", name), "", false
	case apierrors.IsForbidden(err):
		return fmt.Sprintf("its earlier pod is still being deleted on node %s, and paddock may not read that node to see whether it is lost "+
			"(grant get on nodes: the paddock-nodes ClusterRole of deploy/kubernetes/rbac.yaml)", name), "", false
	case err != nil:
		return fmt.Sprintf("its earlier pod is still being deleted on node %s (%v)", name, c.apiError("node "+name, err)), "", false
	}
	ready := nodeCondition(node, corev1.NodeReady)
	if ready != nil && ready.Status == corev1.ConditionTrue {
		return fmt.Sprintf("its earlier pod is still being deleted by node %s", name), "", false
	}
	since, status := "", "no Ready condition"
	var down time.Duration
	if ready != nil {
		down = time.Since(ready.LastTransitionTime.Time)
		since = " since " + ready.LastTransitionTime.UTC().Format(time.RFC3339)
		status = fmt.Sprintf("Ready=%s: %s", ready.Status, ready.Message)
	}
	if tainted(node, kubespec.TaintOutOfService) {
		return "", fmt.Sprintf("the node is tainted %s", kubespec.TaintOutOfService), false
	}
	lostFor := down >= c.cfg.NodeLostAfter || ready == nil
	if lostFor && c.cfg.ForceDeleteLostPods {
		return "", fmt.Sprintf("the node is lost%s (%s) and runner.force_delete_lost_pods is set", since, status), false
	}
	note = fmt.Sprintf("its earlier pod is held by node %s, not ready%s (%s): only that node's kubelet can end it. "+
		"Once the node is really down (shut down or fenced), taint it: kubectl taint nodes %s %s=nodeshutdown:NoExecute; "+
		"or set runner.force_delete_lost_pods to let paddock force-delete the pods of lost nodes "+
		"(a node only cut off may still run the pod, writing its workspace)",
		name, since, status, name, kubespec.TaintOutOfService)
	return note, "", lostFor
}

func nodeCondition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func tainted(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key { // of either effect, as Kubernetes' pod GC reads it
			return true
		}
	}
	return false
}
