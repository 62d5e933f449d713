//go:build kube

package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/sandbox/kube/kubetest"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	testkube "github.com/paddockhq/paddock/internal/testenv/kube"
)

// TestNodeLostOnCluster: `paddock serve` with runner.force_delete_lost_pods, its sandbox
// on the first of two nodes. The node is lost (its kubelet killed): the API says the
// sandbox was lost with its node, and the control plane runs it again by itself on the
// second node, with its workspace, which the list shows.
func TestNodeLostOnCluster(t *testing.T) {
	c := testkube.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b, err := c.AddNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Cordon(ctx, b, true); err != nil {
		t.Fatal(err)
	}
	// The other tests put their sandboxes on the first node: the second is left cordoned.
	t.Cleanup(func() {
		if err := c.Cordon(context.Background(), b, true); err != nil {
			t.Error(err)
		}
	})
	e := servertest.Start(t, func(sc *server.Config) {
		sc.Runner = kubetest.Config(t, sc.Runner)
		sc.Runner.Cluster.ForceDeleteLostPods, sc.Runner.Cluster.NodeLostAfter = true, 5*time.Second
	})
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work", Limits: api.Limits{Memory: "256M"}}), http.StatusCreated, &sb)
	if sb.State != api.StateRunning || sb.Node != testkube.NodeName {
		t.Fatalf("created %+v, want running on %s", sb, testkube.NodeName)
	}
	execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo kept > /workspace/kept"}})

	c.StopKubelet()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		if err := c.StartKubelet(ctx); err != nil && !strings.Contains(err.Error(), "is running") {
			t.Errorf("start the kubelet again: %v", err)
		}
	})
	if err := c.Cordon(ctx, b, false); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(4 * time.Minute)
	var said api.Event
	for said.ID == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no sandbox.agent_exited event after its node was lost")
		}
		var evs api.EventList
		servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?action=sandbox.agent_exited", nil), http.StatusOK, &evs)
		if len(evs.Events) > 0 {
			said = evs.Events[0]
		}
		time.Sleep(200 * time.Millisecond)
	}
	if why, _ := said.Detail["error"].(string); !strings.Contains(why, "its node "+testkube.NodeName+" stopped reporting") {
		t.Errorf("agent_exited event: %+v", said)
	}
	id := sb.ID
	for sb = (api.Sandbox{}); sb.State != api.StateRunning || sb.Node == "" || sb.Node == testkube.NodeName; {
		if time.Now().After(deadline) {
			t.Fatalf("not running again on another node: %+v", sb)
		}
		time.Sleep(200 * time.Millisecond)
		servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+id, nil), http.StatusOK, &sb)
	}
	if sb.Node != b {
		t.Fatalf("running again on %q, want %q", sb.Node, b)
	}
	if res := execIn(t, alice, id, api.ExecRequest{Argv: []string{"cat", "/workspace/kept"}}); string(res.Stdout) != "kept\n" {
		t.Fatalf("the workspace on the other node: %+v", res)
	}
	var list api.SandboxList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes", nil), http.StatusOK, &list)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].Node != b {
		t.Fatalf("list: %+v, want the sandbox on %s", list, b)
	}
	resp := alice.DoToken("DELETE", "/api/v1/sandboxes/"+id, nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		t.Fatalf("delete: %d", resp.StatusCode)
	}
	deadline = time.Now().Add(2 * time.Minute)
	// Only this sandbox's objects: the package's other tests share the namespace.
	for left := leftoversOf(t, id); len(left) > 0; left = leftoversOf(t, id) {
		if time.Now().After(deadline) {
			t.Fatalf("left on the cluster: %v", left)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
