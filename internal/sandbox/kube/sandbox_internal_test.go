package kube

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// TestNotReadyWhy: a pod the node lifecycle controller marked not ready (no reason, its
// container still ready as the kubelet last said) is lost with its node; one the kubelet
// marked not ready says the kubelet's reason, and its node is not called lost.
func TestNotReadyWhy(t *testing.T) {
	pod := func(reason string, ctrReady bool) *corev1.Pod {
		return &corev1.Pod{
			Spec: corev1.PodSpec{NodeName: "node-a"},
			Status: corev1.PodStatus{
				Phase:             corev1.PodRunning,
				Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: reason, Message: "containers with unready status: [agent]"}},
				ContainerStatuses: []corev1.ContainerStatus{{Name: "agent", Ready: ctrReady}},
			},
		}
	}
	for _, tt := range []struct {
		name     string
		pod      *corev1.Pod
		want     string
		nodeLost bool
	}{
		{"the node controller's", pod("", true), "its node node-a stopped reporting", true},
		{"the kubelet's", pod("ContainersNotReady", false), "ContainersNotReady: containers with unready status", false},
		{"no word", pod("", false), "no longer ready: Running", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &Sandbox{podUID: tt.pod.UID}
			why := s.checkPod(tt.pod, false)
			if !strings.Contains(why, tt.want) || s.nodeLost != tt.nodeLost {
				t.Fatalf("why %q, node lost %v; want %q, %v", why, s.nodeLost, tt.want, tt.nodeLost)
			}
		})
	}
}

// TestReadyStep: how a start reads one look at its Sandbox and pod. A Finished condition
// at the start's generation with no pod in the cache is an earlier pod's end (a lost
// node's, ended by its kubelet when it returns): the controller makes a new pod, so the
// start waits for it. Its own pod, ended, ends the start; an earlier pod on its way out
// is waited past.
func TestReadyStep(t *testing.T) {
	const gen = 3
	sb := func(conds ...metav1.Condition) *sbv1.Sandbox {
		return &sbv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "sb-a", UID: "sandbox-uid"}, Status: sbv1.SandboxStatus{Conditions: conds}}
	}
	notReady := func(g int64) metav1.Condition {
		return metav1.Condition{Type: string(sbv1.SandboxConditionReady), Status: metav1.ConditionFalse, ObservedGeneration: g, Reason: "PodFailed", Message: "Pod failed"}
	}
	finished := metav1.Condition{Type: string(sbv1.SandboxConditionFinished), Status: metav1.ConditionTrue, ObservedGeneration: gen, Reason: "PodFailed"}
	yes := true
	pod := func(owner string, phase corev1.PodPhase, ready bool, deleting bool) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "sb-a", OwnerReferences: []metav1.OwnerReference{{UID: "sandbox-uid", Controller: &yes}}},
			Status:     corev1.PodStatus{Phase: phase, PodIP: "10.0.0.9"},
		}
		p.OwnerReferences[0].UID = types.UID(owner)
		if ready {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}
		if deleting {
			now := metav1.Now()
			p.DeletionTimestamp = &now
		}
		return p
	}
	for _, tt := range []struct {
		name    string
		sb      *sbv1.Sandbox
		pod     *corev1.Pod
		gone    bool
		ready   bool
		stop    bool
		earlier bool
		why     string
	}{
		{"write not taken", sb(notReady(gen-1), finished), nil, false, false, false, false, ""},
		{"an earlier pod's end, no pod", sb(notReady(gen), finished), nil, false, false, false, false, "its last pod ended (PodFailed); the controller has yet to make a new one"},
		{"an earlier pod on its way out", sb(notReady(gen), finished), pod("sandbox-uid", corev1.PodFailed, false, true), false, false, false, true, "PodFailed: Pod failed"},
		{"an earlier pod, gone", sb(notReady(gen)), pod("sandbox-uid", corev1.PodFailed, false, true), true, false, false, true, "PodFailed: Pod failed"},
		{"another's pod", sb(notReady(gen)), pod("other-uid", corev1.PodRunning, true, false), false, false, false, true, "PodFailed: Pod failed"},
		{"its own pod ended", sb(notReady(gen), finished), pod("sandbox-uid", corev1.PodFailed, false, false), false, false, true, false, "its pod cannot start: Failed"},
		{"its own pod ready", sb(notReady(gen)), pod("sandbox-uid", corev1.PodRunning, true, false), false, true, false, false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ready, why, stop, earlier := readyStep(tt.sb, tt.pod, tt.gone, gen)
			if (ready != nil) != tt.ready || stop != tt.stop || earlier != tt.earlier || !strings.HasPrefix(why, tt.why) || tt.why == "" && why != "" {
				t.Fatalf("ready %v, why %q, stop %v, earlier %v; want ready %v, why %q, stop %v, earlier %v",
					ready != nil, why, stop, earlier, tt.ready, tt.why, tt.stop, tt.earlier)
			}
		})
	}
}
