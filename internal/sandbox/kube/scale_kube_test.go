//go:build kube

package kube_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/kube"
	"github.com/paddockhq/paddock/internal/sandbox/kube/kubetest"
	"github.com/paddockhq/paddock/internal/testenv"
	testkube "github.com/paddockhq/paddock/internal/testenv/kube"
)

func TestMain(m *testing.M) { os.Exit(testkube.Main(m)) }

// onKWOK is the test cluster with KWOK's simulated nodes for rounds of n sandboxes, and
// the backend's configuration for them.
func onKWOK(t *testing.T, n int) (*testkube.Cluster, kube.Config) {
	t.Helper()
	testenv.RequireRoot(t)
	c := testkube.Shared(t)
	if m := testkube.KWOKMissing(); m != "" {
		t.Skipf("skipping: no KWOK: missing %s", m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := kubetest.PrepareScale(ctx, c, n); err != nil {
		t.Fatal(err)
	}
	return c, kubetest.ScaleConfig(c, t.TempDir())
}

// TestScaleOnSimulatedNodes: 1,000 sandboxes created through paddock's backend at 50 a
// second on KWOK's nodes all reach Ready (their Sandbox's Ready condition, with an
// address, as paddock's informer sees it: KWOK runs no agent to dial), cost one watch on
// Sandboxes and one on pods on the API server between them, and are all deleted, leaving
// nothing. The gate on their P99 is a figure of benchmarks table 24; this test logs it.
func TestScaleOnSimulatedNodes(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 100
	}
	c, cfg := onKWOK(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	r, err := kubetest.PaddockRound(ctx, c, cfg, n, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Ready) != n {
		t.Fatalf("%d of %d sandboxes Ready", len(r.Ready), n)
	}
	s := slices.Clone(r.Ready)
	slices.Sort(s)
	t.Logf("%d sandboxes at %d/s: Ready P50 %s, P99 %s, max %s; %d more watches on Sandboxes, %d on pods",
		n, kubetest.ScaleRate, s[n/2].Round(time.Millisecond), s[n*99/100].Round(time.Millisecond), s[n-1].Round(time.Millisecond), r.Watches, r.PodWatches)
	if r.Watches > 2 {
		t.Errorf("%d running sandboxes held %d more watches on Sandboxes on the API server, want the one shared informer's", n, r.Watches)
	}
	if r.PodWatches < 1 || r.PodWatches > 2 {
		t.Errorf("%d running sandboxes held %d more watches on pods on the API server, want the one shared informer's", n, r.PodWatches)
	}
}

// cutter forwards TCP to an address until cut: then it drops every connection and
// refuses new ones, as an API server that cannot be reached, until mended.
type cutter struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]struct{}
}

func newCutter(t *testing.T, target string) *cutter {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	k := &cutter{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() { ln.Close(); k.cut() })
	go k.serve()
	return k
}

func (k *cutter) serve() {
	for {
		in, err := k.ln.Accept()
		if err != nil {
			return
		}
		k.mu.Lock()
		if k.down {
			k.mu.Unlock()
			in.Close()
			continue
		}
		out, err := net.Dial("tcp", k.target)
		if err != nil {
			k.mu.Unlock()
			in.Close()
			continue
		}
		k.conns[in], k.conns[out] = struct{}{}, struct{}{}
		k.mu.Unlock()
		go func() { _, _ = io.Copy(out, in); out.Close() }()
		go func() { _, _ = io.Copy(in, out); in.Close() }()
	}
}

func (k *cutter) cut() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.down = true
	for c := range k.conns {
		c.Close()
	}
	clear(k.conns)
}

func (k *cutter) mend() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.down = false
}

// TestScaleAPIServerUnreachable: while the API server cannot be reached, paddock says so
// and its sandboxes run on, none marked lost for want of news; what was done to them
// meanwhile (one set Suspended by hand, one's pod template edited) reaches paddock when
// the server is back, through the informer's new list and watch: those two are lost with
// the reason, the edit written back, and the third still runs.
func TestScaleAPIServerUnreachable(t *testing.T) {
	c, cfg := onKWOK(t, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	u, err := url.Parse(c.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	k := newCutter(t, u.Host)
	kc, err := clientcmd.LoadFromFile(cfg.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range kc.Clusters {
		cl.Server = "https://" + k.ln.Addr().String()
	}
	cfg.Kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, cfg.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	cl, err := kube.Open(cfg, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var sbs [3]*kube.Sandbox
	for i := range sbs {
		if sbs[i], err = cl.Place(ctx, kube.Request{ID: runner.NewID(), UID: 1000, GID: 1000}, false); err != nil {
			t.Fatal(err)
		}
	}
	left, suspended, edited := sbs[0], sbs[1], sbs[2]
	defer func() {
		for _, sb := range sbs {
			if err := sb.Destroy(ctx); err != nil {
				t.Error(err)
			}
		}
		if err := kubetest.WaitNothingLeft(ctx, c, kubetest.ScaleConfig(c, t.TempDir()), testenv.Logger(t)); err != nil {
			t.Error(err)
		}
	}()

	k.cut()
	if err := cl.Health(ctx); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("health with the API server cut off: %v, want unavailable", err)
	}
	// The admin's own client reaches the API server directly.
	sandboxes := c.Dynamic.Resource(testkube.SandboxGVR).Namespace(cfg.Namespace)
	if _, err := sandboxes.Patch(ctx, suspended.ID, types.MergePatchType, []byte(`{"spec":{"operatingMode":"Suspended"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	edit := `{"spec":{"podTemplate":{"spec":{"containers":[{"name":"agent","securityContext":{"privileged":true,"allowPrivilegeEscalation":true}}]}}}}`
	if _, err := sandboxes.Patch(ctx, edited.ID, types.MergePatchType, []byte(edit), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// Long enough for the informer to have lost its watch and failed to list again.
	time.Sleep(3 * time.Second)
	for _, sb := range sbs {
		select {
		case <-sb.Exited():
			t.Fatalf("sandbox %s marked lost while the API server was unreachable: %s", sb.ID, sb.LastError())
		default:
		}
	}

	k.mend()
	for _, w := range []struct {
		sb   *kube.Sandbox
		want string
	}{{suspended, "Suspended outside paddock"}, {edited, "edited outside paddock"}} {
		select {
		case <-w.sb.Exited():
		case <-time.After(3 * time.Minute):
			t.Fatalf("sandbox %s: not marked lost after the API server came back", w.sb.ID)
		}
		if why := w.sb.LastError(); !strings.Contains(why, w.want) {
			t.Errorf("sandbox %s: reason %q, want %q", w.sb.ID, why, w.want)
		}
	}
	if err := cl.Health(ctx); err != nil {
		t.Fatalf("health after the API server came back: %v", err)
	}
	o, err := sandboxes.Get(ctx, edited.ID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := o.MarshalJSON(); strings.Contains(string(b), `"privileged":true`) {
		t.Error("the hand edit made while the API server was unreachable is still there")
	}
	select {
	case <-left.Exited():
		t.Fatalf("the untouched sandbox was lost: %s", left.LastError())
	default:
	}
}
