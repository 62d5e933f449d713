//go:build kube

package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/sandbox/kube/kubetest"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	testkube "github.com/paddockhq/paddock/internal/testenv/kube"
)

func init() { runTests = testkube.Main }

// TestServeOnCluster: `paddock serve` with its sandboxes on the test cluster: a sandbox is
// created, answers an exec, is listed with its node, keeps its workspace across stop and
// start (a suspended Sandbox), runs again by itself with its workspace when its pod is
// lost, and leaves nothing on the cluster once deleted.
func TestServeOnCluster(t *testing.T) {
	e := servertest.Start(t, func(c *server.Config) { c.Runner = kubetest.Config(t, c.Runner) })
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work", Limits: api.Limits{Memory: "256M"}}), http.StatusCreated, &sb)
	if sb.State != api.StateRunning || sb.Node != testkube.NodeName {
		t.Fatalf("created %+v, want running on %s", sb, testkube.NodeName)
	}
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo kept > /workspace/kept; id -u"}}); string(res.Stdout) != "1000\n" {
		t.Fatalf("exec: %+v", res)
	}
	var list api.SandboxList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes", nil), http.StatusOK, &list)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].Node != testkube.NodeName {
		t.Fatalf("list: %+v", list)
	}
	for _, op := range []string{"stop", "start"} {
		servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/"+op, nil), http.StatusOK, &sb)
	}
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"cat", "/workspace/kept"}}); string(res.Stdout) != "kept\n" {
		t.Fatalf("after stop and start: %+v", res)
	}
	// Its pod gone (evicted, its node lost): the sandbox says why, and runs again by
	// itself, with its workspace.
	if err := testkube.Shared(t).Client.CoreV1().Pods(kubetest.Namespace).Delete(context.Background(), sb.ID, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	var said api.Event
	for said.ID == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no sandbox.agent_exited event after the pod was deleted")
		}
		var evs api.EventList
		servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?action=sandbox.agent_exited", nil), http.StatusOK, &evs)
		if len(evs.Events) > 0 {
			said = evs.Events[0]
		}
		time.Sleep(100 * time.Millisecond)
	}
	if why, _ := said.Detail["error"].(string); !strings.Contains(why, "lost") || !strings.Contains(why, "deleted") {
		t.Errorf("agent_exited event: %+v", said)
	}
	id := sb.ID
	sb = api.Sandbox{ID: id} // read it again until it runs
	for sb.State != api.StateRunning || sb.Node == "" {
		if time.Now().After(deadline) {
			t.Fatalf("not running again: %+v", sb)
		}
		time.Sleep(200 * time.Millisecond)
		servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID, nil), http.StatusOK, &sb)
	}
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"cat", "/workspace/kept"}}); string(res.Stdout) != "kept\n" {
		t.Fatalf("after the pod's loss: %+v", res)
	}
	resp := alice.DoToken("DELETE", "/api/v1/sandboxes/"+sb.ID, nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		t.Fatalf("delete: %d", resp.StatusCode)
	}
	deadline = time.Now().Add(2 * time.Minute)
	for left := kubetest.Leftovers(t); len(left) > 0; left = kubetest.Leftovers(t) {
		if time.Now().After(deadline) {
			t.Fatalf("left on the cluster: %v", left)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestEvictedOnCluster: a sandbox that writes past its disk into its /tmp (an emptyDir of
// the disk's size on the node) is evicted by the kubelet; the API says so, with the
// kubelet's reason, in the sandbox's sandbox.agent_exited event, and the sandbox runs again
// by itself with its workspace (its volume) and a fresh /tmp.
func TestEvictedOnCluster(t *testing.T) {
	e := servertest.Start(t, func(c *server.Config) { c.Runner = kubetest.Config(t, c.Runner) })
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work", Limits: api.Limits{Memory: "256M", Disk: "64Mi"}}), http.StatusCreated, &sb)
	if sb.State != api.StateRunning {
		t.Fatalf("created %+v", sb)
	}
	pod, err := testkube.Shared(t).Client.CoreV1().Pods(kubetest.Namespace).Get(context.Background(), sb.ID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == "tmp" && (v.EmptyDir == nil || v.EmptyDir.Medium != "" || v.EmptyDir.SizeLimit == nil) {
			t.Fatalf("/tmp is %+v, want an emptyDir on the node's disk with a size limit", v.VolumeSource)
		}
	}
	argv := []string{"sh", "-c", "echo kept > /workspace/kept && dd if=/dev/zero of=/tmp/big bs=1M count=80 2>/dev/null && sync && echo written"}
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: argv}); string(res.Stdout) != "written\n" {
		t.Fatalf("exec: %+v", res)
	}
	deadline := time.Now().Add(3 * time.Minute)
	var said api.Event
	for said.ID == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no sandbox.agent_exited event after the sandbox wrote past its disk")
		}
		var evs api.EventList
		servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?action=sandbox.agent_exited", nil), http.StatusOK, &evs)
		if len(evs.Events) > 0 {
			said = evs.Events[0]
		}
		time.Sleep(200 * time.Millisecond)
	}
	if why, _ := said.Detail["error"].(string); !strings.Contains(why, "lost") || !strings.Contains(why, "Evicted") ||
		!strings.Contains(why, `Usage of EmptyDir volume "tmp" exceeds the limit "64Mi"`) {
		t.Fatalf("agent_exited event: %+v", said)
	}
	id := sb.ID
	sb = api.Sandbox{ID: id}
	for sb.State != api.StateRunning || sb.Node == "" {
		if time.Now().After(deadline) {
			t.Fatalf("not running again: %+v", sb)
		}
		time.Sleep(200 * time.Millisecond)
		servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+id, nil), http.StatusOK, &sb)
	}
	if res := execIn(t, alice, id, api.ExecRequest{Argv: []string{"sh", "-c", "cat /workspace/kept; ls /tmp"}}); string(res.Stdout) != "kept\n" {
		t.Fatalf("after the eviction: %+v", res)
	}
}
