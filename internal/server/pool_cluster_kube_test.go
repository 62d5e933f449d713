//go:build kube

package server_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/sandbox/kube"
	"github.com/paddockhq/paddock/internal/sandbox/kube/kubetest"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/testenv"
	testkube "github.com/paddockhq/paddock/internal/testenv/kube"
)

// appMembers are the claims of the default app's pool: the members the fleet holds.
func appMembers(t *testing.T) map[string]string {
	t.Helper()
	l, err := testkube.Shared(t).Dynamic.Resource(claimGVR).Namespace(kubetest.Namespace).List(context.Background(),
		metav1.ListOptions{LabelSelector: kube.LabelPool + "=" + kube.AppPoolName})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{} // claim (the sandbox's ID) → its member Sandbox
	for _, o := range l.Items {
		out[o.GetName()], _, _ = unstructured.NestedString(o.Object, "status", "sandbox", "name")
	}
	return out
}

// waitMembers waits until the fleet holds one member of the default app's pool that is
// not one of old, its app listening (the pool's size metric), and returns its ID.
func waitMembers(t *testing.T, e *servertest.Env, old ...string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if metricValue(e.Metrics(t), poolSize) == 1 {
			for id := range appMembers(t) {
				if !slices.Contains(old, id) {
					return id
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the default app's pool holds no new member (old %v, claims %v):\n%s", old, appMembers(t), e.Logs)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestServeOnClusterAppPool: pool: {size: 1} on a cluster is the SandboxWarmPool
// paddock-app. The fleet holds a member claimed from it, its app listening; a member whose
// pod dies while idle is replaced, never handed out; a user's new live sandbox is the
// member the pool holds (a hit), its app answers through the proxy, its claim is no longer
// the pool's (a control plane that starts again does not reap it), and it stops and
// starts with its workspace. The control plane holds the shipped RBAC alone.
func TestServeOnClusterAppPool(t *testing.T) {
	rc := kubetest.Config(t, testenv.Config(t))
	rc.Cluster.Kubeconfig = shippedRBAC(t)
	kc := testkube.Shared(t)
	ctx := context.Background()
	cfg := server.Config{Runner: rc, Listen: "127.0.0.1:0", Pool: fleet.PoolConfig{Size: 1}}
	e := servertest.StartOpts(t, cfg, server.Options{AuthOptions: servertest.CheapAuth()})
	var roles api.Roles
	var alice *servertest.Client
	t.Cleanup(func() {
		for _, id := range []string{roles.Live.ID, roles.Dev.ID} {
			if id != "" && alice != nil {
				resp := alice.DoToken("DELETE", "/api/v1/sandboxes/"+id, nil)
				resp.Body.Close()
			}
		}
		e.Stop(true)
		if cl := adminCluster(t); cl != nil {
			_ = cl.RemoveTemplatePool(context.Background(), "")
		}
	})
	first := waitMembers(t, e)
	wp, err := kc.Dynamic.Resource(warmPoolGVR).Namespace(kubetest.Namespace).Get(ctx, kube.AppPoolName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the default app's SandboxWarmPool: %v", err)
	}
	if n, _, _ := unstructured.NestedInt64(wp.Object, "spec", "replicas"); n != 1 {
		t.Errorf("the default app's pool keeps %d pods, want 1", n)
	}

	// A member whose pod dies while idle is replaced, and is not what a user gets.
	if err := kc.Client.CoreV1().Pods(kubetest.Namespace).Delete(ctx, appMembers(t)[first], metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete the member's pod: %v", err)
	}
	second := waitMembers(t, e, first)
	alice = e.Register(t, "alice")

	servertest.Decode(t, alice.DoToken("GET", "/api/v1/roles", nil), http.StatusOK, &roles)
	if roles.Live.ID != second {
		t.Fatalf("the live sandbox is %s, want the pool's member %s (the dead one was %s):\n%s", roles.Live.ID, second, first, e.Logs)
	}
	if hits := metricValue(e.Metrics(t), poolHits); hits != 1 {
		t.Errorf("pool hits %v, want 1", hits)
	}
	if got, err := servedBy(alice, alice.HTTP); err != nil || got != roles.Live.ID {
		t.Fatalf("the live app: %q, %v; want %s", got, err, roles.Live.ID)
	}

	// It is alice's now: its claim is not a pool member's, which a new control plane reaps.
	if _, held := appMembers(t)[roles.Live.ID]; held {
		t.Errorf("the live sandbox's claim is still labelled with the pool")
	}
	if cl := adminCluster(t); cl == nil {
		t.Fatal("no admin client")
	} else if err := cl.ReapTemplateMembers(ctx); err != nil {
		t.Fatalf("reap: %v", err)
	}
	if !hasClaim(t, roles.Live.ID) {
		t.Fatalf("reaping the pools' members deleted the live sandbox's claim")
	}

	// It stops and starts on its member with its workspace, as any persistent sandbox.
	if res := execIn(t, alice, roles.Live.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo kept > note"}}); res.ExitCode != 0 {
		t.Fatalf("write: %+v", res)
	}
	for _, op := range []string{"stop", "start"} {
		resp := alice.DoToken("POST", "/api/v1/sandboxes/"+roles.Live.ID+"/"+op, nil)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", op, resp.Status)
		}
	}
	if res := execIn(t, alice, roles.Live.ID, api.ExecRequest{Argv: []string{"cat", "note"}}); string(res.Stdout) != "kept\n" {
		t.Fatalf("after stop and start: %+v", res)
	}
	if !hasClaim(t, roles.Live.ID) {
		t.Errorf("the live sandbox's claim is gone after stop and start")
	}
}
