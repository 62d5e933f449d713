//go:build kube

package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/sandbox/kube/kubetest"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/store/pgtest"
	"github.com/paddockhq/paddock/internal/testenv"
)

// startClusterReplicas is startReplicas with the replicas' sandboxes on the test cluster.
// No CA file is given: the first replica makes the channel's CA and the others load it
// from the database.
func startClusterReplicas(t *testing.T, dbURL string, n int) []*replica {
	t.Helper()
	shared := t.TempDir()
	base := kubetest.Config(t, testenv.Config(t))
	var rs []*replica
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		rc := testenv.Config(t)
		r := &replica{id: fmt.Sprintf("r%d", i+1), addr: addr, url: "http://" + addr, config: filepath.Join(t.TempDir(), "paddock.yaml")}
		yml := fmt.Sprintf(`data_dir: %s
state_dir: %s
store: %s
secrets_key_file: %s
replica:
  id: %s
  advertise: %s
  cluster_key_file: %s
  heartbeat_ttl: %s
runner:
  backend: kubernetes
  kubeconfig: %s
  namespace: %s
  image: %s
  image_pull_policy: Never
  node_usr: true
  storage_class: %s
  ready_timeout: 3m
`, rc.DataDir, rc.StateDir, dbURL, filepath.Join(shared, "secrets.key"), r.id, addr, filepath.Join(shared, "cluster.key"), testHeartbeatTTL,
			base.Cluster.Kubeconfig, kubetest.Namespace, kubetest.Image, kubetest.StorageClass)
		if err := os.WriteFile(r.config, []byte(yml), 0o600); err != nil {
			t.Fatal(err)
		}
		r.start(t)
		rs = append(rs, r)
	}
	t.Cleanup(func() {
		for _, r := range rs {
			if r.cmd != nil {
				stopServe(t, r.cmd)
			}
			if t.Failed() && r.out != nil {
				out := r.out.String()
				t.Logf("%s's log (its last 8 KiB):\n%s", r.id, out[max(0, len(out)-8192):])
			}
		}
	})
	return rs
}

// TestReplicasTakeOverOnCluster: three `paddock serve` replicas on one PostgreSQL, their
// sandboxes on the test cluster. The replica that made a user's sandboxes is killed with
// SIGKILL; once its heartbeat has expired, a surviving replica takes them over (one of
// the two, once), and exec, files and the live app through the proxy work through either
// survivor, with what was written before the kill still there. The killed replica,
// started again with its ID, neither takes them back nor stops them: it forwards to the
// new owner. A new owner paused (SIGSTOP) past its TTL loses its sandbox to another
// replica in turn, and once resumed lets go of it without stopping its pod.
func TestReplicasTakeOverOnCluster(t *testing.T) {
	testenv.RequireRoot(t)
	dbURL := pgtest.URL(t)
	rs := startClusterReplicas(t, dbURL, 3)
	r1, r2, r3 := rs[0], rs[1], rs[2]
	alice := (&servertest.Env{URL: r1.url}).Register(t, "alice")
	var roles api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
	t.Cleanup(func() {
		for _, id := range []string{roles.Live.ID, roles.Dev.ID} {
			tokenDo(context.Background(), r2.url, alice.Token, "DELETE", "/api/v1/sandboxes/"+id, nil)
		}
	})
	st, err := store.Open(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ownerOf := func(id string) string {
		t.Helper()
		rec, err := st.SandboxByID(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Replica
	}
	for _, id := range []string{roles.Live.ID, roles.Dev.ID} {
		if got := ownerOf(id); got != "r1" {
			t.Fatalf("sandbox %s is %q's, want r1's (it was made through r1)", id, got)
		}
	}
	dev := roles.Dev.ID
	write := func(via *replica, name, text string) (int, string) {
		code, body, err := tokenDo(context.Background(), via.url, alice.Token, "PUT", "/api/v1/sandboxes/"+dev+"/files/content?path="+name, []byte(text))
		if err != nil {
			return 0, err.Error()
		}
		return code, string(body)
	}
	read := func(via *replica, name string) (int, string) {
		code, body, err := tokenDo(context.Background(), via.url, alice.Token, "GET", "/api/v1/sandboxes/"+dev+"/files/content?path="+name, nil)
		if err != nil {
			return 0, err.Error()
		}
		return code, string(body)
	}
	execVia := func(via *replica, argv ...string) (int, string) {
		b, _ := json.Marshal(api.ExecRequest{Argv: argv})
		code, body, err := tokenDo(context.Background(), via.url, alice.Token, "POST", "/api/v1/sandboxes/"+dev+"/exec", b)
		if err != nil {
			return 0, err.Error()
		}
		var res api.ExecResult
		if code == http.StatusOK && json.Unmarshal(body, &res) == nil {
			return code, string(res.Stdout)
		}
		return code, string(body)
	}
	liveVia := func(via *replica) (int, string) {
		code, v, err := info(via.url, alice.User.ID, "live", alice.Token, nil)
		if err != nil {
			return 0, err.Error()
		}
		return code, v["sandbox"] + v["body"]
	}
	// Acknowledged through r2 (forwarded to r1) before the kill.
	if code, body := write(r2, "before.txt", "written before the kill"); code != http.StatusOK {
		t.Fatalf("write through r2: %d %s", code, body)
	}
	if code, out := execVia(r3, "cat", "before.txt"); code != http.StatusOK || out != "written before the kill" {
		t.Fatalf("exec through r3 before the kill: %d %q", code, out)
	}

	r1.kill()
	killed := time.Now()
	// Within the heartbeat's TTL and a bounded time after it (an adoption dials the agent
	// and writes its Secret), exec, files and the app answer through both survivors.
	deadline := killed.Add(testHeartbeatTTL + 3*time.Minute)
	var last string
	for _, via := range []*replica{r2, r3} {
		for {
			code, out := execVia(via, "cat", "before.txt")
			if code == http.StatusOK && out == "written before the kill" {
				break
			}
			last = fmt.Sprintf("%d %s", code, out)
			if time.Now().After(deadline) {
				t.Fatalf("exec through %s after r1's death: %s", via.id, last)
			}
			time.Sleep(200 * time.Millisecond)
		}
		for {
			code, out := liveVia(via)
			if code == http.StatusOK && strings.HasPrefix(out, roles.Live.ID) {
				break
			}
			last = fmt.Sprintf("%d %s", code, out)
			if time.Now().After(deadline) {
				t.Fatalf("the live app through %s after r1's death: %s", via.id, last)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	t.Logf("served through both survivors %s after the kill", time.Since(killed).Round(time.Millisecond))
	owners := map[string]string{}
	for _, id := range []string{roles.Live.ID, roles.Dev.ID} {
		owners[id] = ownerOf(id)
		if owners[id] != "r2" && owners[id] != "r3" {
			t.Fatalf("sandbox %s is %q's after r1's death, want a survivor's", id, owners[id])
		}
		// One survivor took it over: the other did not adopt it too.
		n := strings.Count(r2.out.String()+r3.out.String(), `took over a dead replica's sandbox" sandbox=`+id)
		if n != 1 {
			t.Errorf("sandbox %s taken over %d times, want once:\nr2:\n%s\nr3:\n%s", id, n, r2.out, r3.out)
		}
	}
	if code, body := write(r3, "after.txt", "written after the takeover"); code != http.StatusOK {
		t.Fatalf("write through r3 after the takeover: %d %s", code, body)
	}

	// r1 again, with its ID: the sandboxes stay the survivors', running, and r1 forwards.
	r1.start(t)
	if code, out := execVia(r1, "cat", "before.txt", "after.txt"); code != http.StatusOK || out != "written before the killwritten after the takeover" {
		t.Fatalf("exec through the restarted r1: %d %q", code, out)
	}
	if code, out := liveVia(r1); code != http.StatusOK || !strings.HasPrefix(out, roles.Live.ID) {
		t.Fatalf("the live app through the restarted r1: %d %s", code, out)
	}
	// A few of its heartbeats later (each one sweeps), nothing has moved.
	waitBeats(t, st, "r1", 3)
	for id, was := range owners {
		if got := ownerOf(id); got != was {
			t.Errorf("sandbox %s moved from %s to %s after r1 came back", id, was, got)
		}
		var sb api.Sandbox
		code, body, err := tokenDo(context.Background(), r1.url, alice.Token, "GET", "/api/v1/sandboxes/"+id, nil)
		if err != nil || code != http.StatusOK || json.Unmarshal(body, &sb) != nil || sb.State != api.StateRunning {
			t.Errorf("sandbox %s through r1 after its restart: %d %s %v, want running", id, code, body, err)
		}
	}
	if strings.Contains(r1.out.String(), "took over") {
		t.Errorf("the restarted r1 took a sandbox over:\n%s", r1.out)
	}
	if code, out := read(r2, "after.txt"); code != http.StatusOK || out != "written after the takeover" {
		t.Errorf("read through r2 at the end: %d %q", code, out)
	}

	// The dev sandbox's owner paused (SIGSTOP) past its TTL: another replica takes it over;
	// resumed, the paused one lets go of it without stopping it, and forwards.
	if code, out := execVia(r3, "sh", "-c", "echo alive > /tmp/alive"); code != http.StatusOK {
		t.Fatalf("exec before the pause: %d %s", code, out)
	}
	paused := r2
	if owners[dev] == "r3" {
		paused = r3
	}
	paused.cmd.Process.Signal(syscall.SIGSTOP)
	deadline = time.Now().Add(testHeartbeatTTL + 3*time.Minute)
	for ownerOf(dev) == paused.id {
		if time.Now().After(deadline) {
			paused.cmd.Process.Signal(syscall.SIGCONT)
			t.Fatalf("sandbox %s still %s's while it is paused", dev, paused.id)
		}
		time.Sleep(200 * time.Millisecond)
	}
	paused.cmd.Process.Signal(syscall.SIGCONT)
	for !strings.Contains(paused.out.String(), "let go of it, still running") {
		if time.Now().After(deadline) {
			t.Fatalf("%s, resumed, did not let go of sandbox %s", paused.id, dev)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, out := execVia(paused, "cat", "/tmp/alive", "before.txt"); code != http.StatusOK || out != "alive\nwritten before the kill" {
		t.Fatalf("exec through %s after it let go: %d %q, want the same pod's /tmp/alive and the workspace", paused.id, code, out)
	}
	if n := strings.Count(r1.out.String()+r2.out.String()+r3.out.String(), `took over a dead replica's sandbox" sandbox=`+dev); n != 2 {
		t.Errorf("sandbox %s taken over %d times in all, want twice", dev, n)
	}
}

// waitBeats waits until replica id has recorded n more heartbeats.
func waitBeats(t *testing.T, st *store.Store, id string, n int) {
	t.Helper()
	first, err := st.ReplicaByID(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	seen, at := 0, first.HeartbeatAt
	for deadline := time.Now().Add(2 * time.Minute); seen < n; time.Sleep(100 * time.Millisecond) {
		r, err := st.ReplicaByID(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if r.HeartbeatAt.After(at) {
			seen, at = seen+1, r.HeartbeatAt
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s beat %d times in 2 minutes, want %d", id, seen, n)
		}
	}
}
