package kube

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
