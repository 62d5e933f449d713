package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Simulated nodes (KWOK) for scale tests: their pods are never run, KWOK only reports them
// Running and Ready with an address, the way a kubelet would. A pod goes to them with
// KWOKNodeSelector and KWOKToleration; nothing else is scheduled there (their taint).
const (
	kwokAnnotation = "kwok.x-k8s.io/node"
	// KWOKPodCIDR is where the simulated pods' addresses come from (no route leads there).
	KWOKPodCIDR = "10.236.0.1/16"
)

var (
	// KWOKNodeSelector puts a pod on a simulated node.
	KWOKNodeSelector = map[string]string{"type": "kwok"}
	// KWOKToleration lets a pod onto a simulated node.
	KWOKToleration = corev1.Toleration{Key: kwokAnnotation, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
)

// KWOKMissing says what StartKWOK needs that setup has not installed (empty when nothing).
func KWOKMissing() string {
	for _, f := range []string{"kwok/kwok", "kwok/stages.yaml"} {
		if _, err := os.Stat(filepath.Join(Prefix(), f)); err != nil {
			return filepath.Join(Prefix(), f) + " (scripts/setup.sh builds it)"
		}
	}
	return ""
}

// StartKWOK starts KWOK (once per cluster), with its fast node and pod stages, and adds
// simulated nodes kwok-node-0 … kwok-node-(nodes-1), each taking up to podsPerNode pods
// (those already there are kept). It returns their names once each is Ready. The real
// node is left to its kubelet.
func (c *Cluster) StartKWOK(ctx context.Context, nodes, podsPerNode int) ([]string, error) {
	if m := KWOKMissing(); m != "" {
		return nil, fmt.Errorf("kwok: missing %s", m)
	}
	c.kwokMu.Lock()
	defer c.kwokMu.Unlock()
	kw := c.procByName("kwok")
	if kw == nil {
		var err error
		kw, err = c.run(Options{}, "kwok", filepath.Join(Prefix(), "kwok", "kwok"), nil,
			"--kubeconfig="+c.Kubeconfig, "--config="+filepath.Join(Prefix(), "kwok", "stages.yaml"),
			"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector="+kwokAnnotation+"=fake",
			"--cidr="+KWOKPodCIDR, "--node-ip=10.236.255.254", "--node-port=0", "--server-address=")
		if err != nil {
			return nil, err
		}
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("512Gi"),
		corev1.ResourcePods:   *resource.NewQuantity(int64(podsPerNode), resource.DecimalSI),
	}
	var names []string
	for i := range nodes {
		name := fmt.Sprintf("kwok-node-%d", i)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Annotations: map[string]string{kwokAnnotation: "fake"},
				Labels:      map[string]string{"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
			},
			Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: kwokAnnotation, Value: "fake", Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
		}
		if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("kwok: create node %s: %w", name, err)
		}
		names = append(names, name)
	}
	for _, name := range names {
		err := waitFor(ctx, "simulated node "+name+" to be Ready", 2*time.Minute, kw, func() error {
			n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					return nil
				}
			}
			return fmt.Errorf("node %s not Ready yet", name)
		})
		if err != nil {
			return nil, fmt.Errorf("kwok: %w%s", err, c.logTails())
		}
	}
	return names, nil
}
