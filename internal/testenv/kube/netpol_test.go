package kube

import (
	"context"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestUnquote(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{"FORWARD", "-j", "X"}, []string{"FORWARD", "-j", "X"}},
		{[]string{"FORWARD", "--comment", `"kube-router`, `netpol"`, "-j", "X"}, []string{"FORWARD", "--comment", "kube-router netpol", "-j", "X"}},
		{[]string{"--comment", `"one"`}, []string{"--comment", "one"}},
		{[]string{"--comment", `"never`, "closed"}, []string{"--comment", "never closed"}},
	} {
		if got := unquote(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("unquote(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestEnforcerLeavesNothing: a cluster started with the NetworkPolicy enforcer programs a
// pod a policy selects (chains and ipsets in the host's tables), and stopping it removes
// every chain, jump and ipset kube-router made.
func TestEnforcerLeavesNothing(t *testing.T) {
	if m := Missing(); m != "" {
		t.Skipf("skipping: no test cluster on this machine: missing %s", m)
	}
	if m := NetworkPolicyMissing(); m != "" {
		t.Skipf("skipping: no NetworkPolicy enforcer on this machine: missing %s", m)
	}
	ctx := context.Background()
	c, err := Start(ctx, Options{NetworkPolicy: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	ns := namespace(t, c)
	policy := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "only-friends", Namespace: ns},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "friend"}},
			}}}},
		},
	}
	if _, err := c.Client.NetworkingV1().NetworkPolicies(ns).Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: ns, Labels: map[string]string{"app": "guarded"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "pause", Image: PauseImage, ImagePullPolicy: corev1.PullNever}}},
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the enforcer to program the pod with its policy", 3*time.Minute, func() (bool, string, error) {
		rules, err := c.PodFirewall(ns, pod.Name)
		if err != nil {
			return false, err.Error(), nil
		}
		return strings.Contains(rules, "KUBE-NWPLCY-"), rules, nil
	})
	if left := kubeRouterLeft(t); len(left) == 0 {
		t.Fatal("no chain or ipset of kube-router's found while it runs: the check below would prove nothing")
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if left := kubeRouterLeft(t); len(left) > 0 {
		t.Errorf("the stopped cluster left kube-router's:\n  %s", strings.Join(left, "\n  "))
	}
	if _, err := c.PodFirewall(ns, pod.Name); err == nil {
		t.Error("PodFirewall answered for a stopped cluster")
	}
}

// kubeRouterLeft lists kube-router's rules, chains and ipsets on the host.
func kubeRouterLeft(t *testing.T) []string {
	t.Helper()
	var left []string
	rules, err := iptables("-S")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(rules, "\n") {
		for _, p := range kubeRouterChainPrefixes {
			if strings.Contains(line, p) {
				left = append(left, line)
				break
			}
		}
	}
	sets, err := exec.Command("ipset", "list", "-n").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range strings.Fields(string(sets)) {
		if hasAnyPrefix(s, kubeRouterSetPrefixes) {
			left = append(left, "ipset "+s)
		}
	}
	return left
}
