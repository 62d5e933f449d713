//go:build kube

package netpol_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/kube"
	"github.com/paddockhq/paddock/internal/sandbox/kube/kubetest"
	"github.com/paddockhq/paddock/internal/testenv"
	testkube "github.com/paddockhq/paddock/internal/testenv/kube"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// TestShippedPolicyOnSandboxes: paddock's own sandboxes under the shipped policy and the
// enforcer. The control plane (the runner, on the node) still reaches each agent; a
// command in a sandbox reaches no host port, but reaches the node's NodePort range, which
// kube-router always allows, unless the sandbox has runner.pod_firewall.
func TestShippedPolicyOnSandboxes(t *testing.T) {
	testenv.RequireRoot(t)
	c := testkube.Shared(t)
	cfg := kubetest.Config(t, testenv.Config(t))
	policies := applyShipped(t, c, kubetest.Namespace)
	plain := startSandbox(t, c, cfg, policies, "plain")
	cfg.Cluster.PodFirewall = true
	walled := startSandbox(t, c, cfg, policies, "walled")
	// The node at the pod network's gateway (the bridge has its address once a pod runs).
	gw := gateway(c.PodSubnet)
	hostPort := serveTCP(t, gw, nil)
	nodePort := serveNodePort(t, gw)

	connect := func(sb *runner.Sandbox, addr string) (string, bool) {
		t.Helper()
		script := "exec 3<>/dev/tcp/" + strings.Replace(addr, ":", "/", 1) + " && echo CONNECTED"
		out, code := run(t, sb, script)
		return out, code == 0 && strings.Contains(out, "CONNECTED")
	}
	for _, sb := range []*runner.Sandbox{plain, walled} {
		if out, code := run(t, sb, "id -u"); code != 0 || out != "1000\n" {
			t.Errorf("sandbox %s: the control plane's exec: %q, exit %d", sb.ID, out, code)
		}
		if out, ok := connect(sb, hostPort); ok {
			t.Errorf("sandbox %s reached a host port on the node (%s): %s", sb.ID, hostPort, out)
		}
	}
	if out, ok := connect(plain, nodePort); !ok {
		t.Errorf("a sandbox without pod_firewall no longer reaches the node's NodePort range (%s): %s; docs/kubernetes.md says it does under kube-router", nodePort, out)
	}
	if out, ok := connect(walled, nodePort); ok {
		t.Errorf("a sandbox with pod_firewall reached the node's NodePort range (%s): %s", nodePort, out)
	}
}

// startSandbox creates a sandbox through a runner of cfg and waits for the enforcer to
// program its pod.
func startSandbox(t *testing.T, c *testkube.Cluster, cfg runner.Config, policies []networkPolicy, user string) *runner.Sandbox {
	t.Helper()
	r := runner.New(cfg, testenv.Logger(t))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sb, err := r.Create(ctx, runner.Spec{User: user})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = sb.Destroy(context.Background()) })
	pods, err := c.Client.CoreV1().Pods(kubetest.Namespace).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelSandbox + "=" + sb.ID})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the pod of sandbox %s: %v (%d pods)", sb.ID, err, len(pods.Items))
	}
	waitFirewall(t, c, &pods.Items[0], policies)
	return sb
}

// run runs a bash script in the sandbox as its user, through the agent.
func run(t *testing.T, sb *runner.Sandbox, script string) (string, int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := sb.Agent().Process().Execute(ctx, &pb.ExecuteRequest{Argv: []string{"bash", "-c", script}})
	if err != nil {
		t.Fatalf("exec %q in %s: %v", script, sb.ID, err)
	}
	return fmt.Sprint(string(res.GetStdout()), string(res.GetStderr())), res.GetStatus().GetExitCode()
}
