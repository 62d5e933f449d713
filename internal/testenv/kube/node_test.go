package kube

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSecondNode: AddNode starts a second real node on the machine, Ready beside the
// first, with the images imported before it came (the hello image) and those imported
// after; a pod put there runs under its own containerd and kubelet (its logs come through
// that kubelet), in a cgroup under the node's own root.
func TestSecondNode(t *testing.T) {
	c := Shared(t)
	importHello(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	name, err := c.AddNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Other tests of the package expect their pods on the first node.
	t.Cleanup(func() {
		if err := c.Cordon(context.Background(), name, true); err != nil {
			t.Error(err)
		}
	})
	if again, err := c.AddNode(ctx); err != nil || again != name {
		t.Fatalf("AddNode again: %q, %v", again, err)
	}
	for _, n := range []string{NodeName, name} {
		if err := c.nodeReady(n); err != nil {
			t.Fatal(err)
		}
	}
	ns := namespace(t, c)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			NodeSelector:  map[string]string{"kubernetes.io/hostname": name},
			Containers: []corev1.Container{{
				Name: "hello", Image: helloImage, ImagePullPolicy: corev1.PullNever,
				Args: []string{"say", "hello from the second node"},
			}},
		},
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the pod to succeed on the second node", 3*time.Minute, func() (bool, string, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "hello", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		if p.Status.Phase == corev1.PodFailed {
			return false, "", fmt.Errorf("pod failed: %+v", p.Status)
		}
		if p.Spec.NodeName != "" && p.Spec.NodeName != name {
			return false, "", fmt.Errorf("pod put on %s, want %s", p.Spec.NodeName, name)
		}
		return p.Status.Phase == corev1.PodSucceeded, fmt.Sprintf("%s %+v", p.Status.Phase, p.Status.ContainerStatuses), nil
	})
	logs, err := c.Client.CoreV1().Pods(ns).GetLogs("hello", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("read the pod's logs (apiserver → the second kubelet): %v", err)
	}
	if !strings.Contains(string(logs), "hello from the second node\n") {
		t.Fatalf("logs = %q, want the pod's line", logs)
	}
	if want := ":memory:" + c.cgroupRoot + "/" + name + "/kubepods"; !strings.Contains(string(logs), want) {
		t.Errorf("logs = %q, want the container in a memory cgroup under %s", logs, want)
	}
}
