//go:build kube

package runner_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/kube/kubetest"
	"github.com/paddockhq/paddock/internal/testenv"
	testkube "github.com/paddockhq/paddock/internal/testenv/kube"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// TestClusterPodFirewall: with runner.pod_firewall, a process in a sandbox on the cluster
// reaches nothing off the pod's loopback, though the test cluster's network plugin
// enforces no NetworkPolicy: not the node (at the pod network's gateway, where this test
// serves), not over UDP; the agent still answers the control plane, and the sandbox's
// loopback still works.
func TestClusterPodFirewall(t *testing.T) {
	testenv.RequireRoot(t)
	cfg := kubetest.Config(t, testenv.Config(t))
	cfg.Cluster.PodFirewall = true
	t.Cleanup(func() {
		for _, o := range kubetest.Leftovers(t) {
			t.Errorf("left on the cluster: %s", o)
		}
	})
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "REACHED") })}
	go srv.Serve(l)
	defer srv.Close()
	subnet := testkube.Shared(t).PodSubnet
	gw := make(net.IP, 4)
	copy(gw, subnet.IP.To4())
	gw[3]++
	target := net.JoinHostPort(gw.String(), fmt.Sprint(l.Addr().(*net.TCPAddr).Port))

	r := runner.New(cfg, testenv.Logger(t))
	sb := createOn(t, r, runner.Spec{User: "fw"})
	defer sb.Destroy(context.Background())
	run := func(script string) (string, int32) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := sb.Agent().Process().Execute(ctx, &pb.ExecuteRequest{Argv: []string{"bash", "-c", script}})
		if err != nil {
			t.Fatalf("exec %q: %v", script, err)
		}
		return string(res.GetStdout()) + string(res.GetStderr()), res.GetStatus().GetExitCode()
	}
	if out, code := run("id -u"); code != 0 || out != "1000\n" {
		t.Fatalf("exec: %q %d", out, code)
	}
	for _, script := range []string{
		"curl -sS -m 10 http://" + target + "/",
		"exec 3<>/dev/tcp/" + strings.Replace(target, ":", "/", 1) + " && echo CONNECTED",
		"echo x > /dev/udp/" + gw.String() + "/53 && echo SENT",
	} {
		if out, code := run(script); code == 0 || strings.Contains(out, "REACHED") || strings.Contains(out, "CONNECTED") || strings.Contains(out, "SENT") {
			t.Errorf("%s: exit %d %q: reached the node from the sandbox", script, code, out)
		}
	}
	// The sandbox's own loopback is untouched.
	if out, code := run("python3 -m http.server -b 127.0.0.1 8000 >/dev/null 2>&1 & for i in $(seq 100); do curl -fsS -m 2 http://127.0.0.1:8000/ >/dev/null && echo LOOPBACK && break; sleep 0.2; done; kill %1"); code != 0 || !strings.Contains(out, "LOOPBACK") {
		t.Errorf("the sandbox's loopback: %q %d", out, code)
	}
}
