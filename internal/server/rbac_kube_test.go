//go:build kube

package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/egress"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/provider/npmregistry"
	"github.com/paddockhq/paddock/internal/sandbox/kube"
	"github.com/paddockhq/paddock/internal/sandbox/kube/kubetest"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/testenv"
	testkube "github.com/paddockhq/paddock/internal/testenv/kube"
)

var (
	rbacOnce       sync.Once
	rbacKubeconfig string
	rbacErr        error
)

// shippedRBAC applies deploy/kubernetes/rbac.yaml to the test cluster as it ships, but for
// the Role's namespace (the tests' sandboxes'), and returns a kubeconfig whose only
// credential is a token of its service account from the TokenRequest API: the control
// plane then has the shipped rights and nothing more.
func shippedRBAC(t *testing.T) string {
	t.Helper()
	c := testkube.Shared(t)
	rbacOnce.Do(func() { rbacKubeconfig, rbacErr = applyShippedRBAC(c) })
	if rbacErr != nil {
		t.Fatal(rbacErr)
	}
	return rbacKubeconfig
}

func applyShippedRBAC(c *testkube.Cluster) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := os.ReadFile("../../deploy/kubernetes/rbac.yaml")
	if err != nil {
		return "", err
	}
	var sa corev1.ServiceAccount
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return "", err
		}
		err := apply(ctx, c, meta.Kind, []byte(doc), &sa)
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("%s: %w", meta.Kind, err)
		}
	}
	if sa.Name == "" {
		return "", errors.New("rbac.yaml has no ServiceAccount")
	}
	expiry := int64(3 * 3600)
	tr, err := c.Client.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	admin, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		return "", err
	}
	kc := clientcmdapi.NewConfig()
	for name, cl := range admin.Clusters {
		kc.Clusters[name] = cl
		kc.AuthInfos["paddock"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
		kc.Contexts["paddock"] = &clientcmdapi.Context{Cluster: name, AuthInfo: "paddock"}
		kc.CurrentContext = "paddock"
	}
	dir, err := os.MkdirTemp("", "pdk-rbac")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, clientcmd.WriteToFile(*kc, path)
}

// apply creates one object of rbac.yaml; the Role and its binding go in the tests'
// sandboxes' namespace, the service account's namespace is made first.
func apply(ctx context.Context, c *testkube.Cluster, kind string, doc []byte, sa *corev1.ServiceAccount) error {
	rbac := c.Client.RbacV1()
	switch kind {
	case "ServiceAccount":
		if err := yaml.UnmarshalStrict(doc, sa); err != nil {
			return err
		}
		_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sa.Namespace}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		_, err = c.Client.CoreV1().ServiceAccounts(sa.Namespace).Create(ctx, sa, metav1.CreateOptions{})
		return err
	case "Role":
		var o rbacv1.Role
		if err := yaml.UnmarshalStrict(doc, &o); err != nil {
			return err
		}
		o.Namespace = kubetest.Namespace
		_, err := rbac.Roles(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		return err
	case "RoleBinding":
		var o rbacv1.RoleBinding
		if err := yaml.UnmarshalStrict(doc, &o); err != nil {
			return err
		}
		o.Namespace = kubetest.Namespace
		_, err := rbac.RoleBindings(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		return err
	case "ClusterRole":
		var o rbacv1.ClusterRole
		if err := yaml.UnmarshalStrict(doc, &o); err != nil {
			return err
		}
		_, err := rbac.ClusterRoles().Create(ctx, &o, metav1.CreateOptions{})
		return err
	case "ClusterRoleBinding":
		var o rbacv1.ClusterRoleBinding
		if err := yaml.UnmarshalStrict(doc, &o); err != nil {
			return err
		}
		_, err := rbac.ClusterRoleBindings().Create(ctx, &o, metav1.CreateOptions{})
		return err
	}
	return fmt.Errorf("rbac.yaml: kind %q is not one the test applies", kind)
}

// cli runs the real paddock binary with its credentials under home.
func cli(t *testing.T, home, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(testenv.Binary(t, "paddock"), args...)
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("paddock %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// TestServeOnClusterBinary: the built `paddock serve`, its sandboxes on the test cluster
// with the shipped RBAC as its only rights (a service account's token), driven through
// the CLI, HTTP and WebSocket as a person would: login, a sandbox made, exec, files,
// checkpoint and undo, a terminal, the live app through the proxy, promotion of the dev
// sandbox, stop and start keeping the workspace, `sandbox ls` naming the node, and a
// delete that leaves nothing of it in the namespace.
func TestServeOnClusterBinary(t *testing.T) {
	rc := kubetest.Config(t, testenv.Config(t))
	kc := shippedRBAC(t)
	dir := t.TempDir()
	config := filepath.Join(dir, "paddock.yaml")
	yml := fmt.Sprintf(`data_dir: %s
state_dir: %s
runner:
  backend: kubernetes
  kubeconfig: %s
  namespace: %s
  image: %s
  image_pull_policy: Never
  node_usr: true
  storage_class: %s
  ready_timeout: 3m
  warm_pool: {size: 1}
`, rc.DataDir, rc.StateDir, kc, kubetest.Namespace, kubetest.Image, kubetest.StorageClass)
	if err := os.WriteFile(config, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	url, cmd, out := startServe(t, config)
	e := &servertest.Env{URL: url}
	alice := e.Register(t, "alice")
	var roles api.Roles
	t.Cleanup(func() {
		// A clean stop leaves sandboxes running by design; the test removes its own.
		for _, id := range []string{roles.Live.ID, roles.Dev.ID} {
			if id != "" {
				resp := alice.DoToken("DELETE", "/api/v1/sandboxes/"+id, nil)
				resp.Body.Close()
			}
		}
		stopServe(t, cmd)
		if t.Failed() {
			t.Logf("paddock serve:\n%s", out)
		}
		if cl := adminCluster(t); cl != nil {
			_ = cl.RemovePool(context.Background())
		}
	})
	home := t.TempDir()
	cli(t, home, "correct horse battery alice\n", "login", url, "-u", "alice", "--password-stdin")

	id := strings.TrimSpace(cli(t, home, "", "sandbox", "create", "--name", "work", "--memory", "256M"))
	if got := cli(t, home, "", "sandbox", "exec", id, "--", "sh", "-c", "id -u"); got != "1000\n" {
		t.Fatalf("exec: %q", got)
	}
	local := filepath.Join(dir, "note.txt")
	if err := os.WriteFile(local, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cli(t, home, "", "sandbox", "cp", local, id+":note.txt")
	cli(t, home, "", "checkpoint", id, "-m", "first")
	cli(t, home, "", "sandbox", "exec", id, "--", "sh", "-c", "echo second > note.txt")
	back := filepath.Join(dir, "back.txt")
	cli(t, home, "", "sandbox", "cp", id+":note.txt", back)
	if b, _ := os.ReadFile(back); string(b) != "second\n" {
		t.Fatalf("read back: %q", b)
	}
	cli(t, home, "", "undo", id)
	if got := cli(t, home, "", "sandbox", "exec", id, "--", "cat", "note.txt"); got != "first\n" {
		t.Fatalf("after undo: %q", got)
	}

	// A terminal: what is typed comes back, with the shell's answer.
	ws := "ws" + strings.TrimPrefix(url, "http") + "/api/v1/sandboxes/" + id + "/exec/stream"
	s := dialStream(t, ws, alice.Token, api.StreamStart{Argv: []string{"/bin/sh"}, TTY: &api.TTYSize{Rows: 24, Cols: 80}})
	s.send("echo typed-$((6*7))\n")
	if o, _ := s.until("typed-42"); !strings.Contains(o, "echo typed-") {
		t.Errorf("the terminal did not echo what was typed: %q", o)
	}
	s.ws.CloseNow()

	// The roles: the live app through the proxy, then the dev sandbox promoted. The warm
	// pool has a member ready by then, so one of them is a claim of it (a token review,
	// the ClusterRole's one right).
	waitPoolReady(t, kube.PoolName)
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/roles", nil), http.StatusOK, &roles)
	if !hasClaim(t, roles.Live.ID) && !hasClaim(t, roles.Dev.ID) {
		t.Errorf("neither the live sandbox %s nor the dev sandbox %s is a claim of the warm pool:\n%s", roles.Live.ID, roles.Dev.ID, out)
	}
	if got, err := servedBy(alice, alice.HTTP); err != nil || got != roles.Live.ID {
		t.Fatalf("the live app: %q, %v; want %s", got, err, roles.Live.ID)
	}
	cli(t, home, "", "sandbox", "exec", roles.Dev.ID, "--", "sh", "-c", "echo from-dev > made-in-dev")
	if got := cli(t, home, "", "promote"); !strings.Contains(got, "live is now "+roles.Dev.ID) {
		t.Fatalf("promote: %q", got)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got, err := servedBy(alice, alice.HTTP)
		if err == nil && got == roles.Dev.ID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after promote the live app is %q (%v), want the old dev %s", got, err, roles.Dev.ID)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := cli(t, home, "", "sandbox", "exec", roles.Dev.ID, "--", "cat", "made-in-dev"); got != "from-dev\n" {
		t.Errorf("the promoted sandbox's workspace: %q", got)
	}

	cli(t, home, "", "sandbox", "stop", id)
	cli(t, home, "", "sandbox", "start", id)
	if got := cli(t, home, "", "sandbox", "exec", id, "--", "cat", "note.txt"); got != "first\n" {
		t.Fatalf("after stop and start: %q", got)
	}
	ls := cli(t, home, "", "sandbox", "ls")
	if !strings.Contains(strings.SplitN(ls, "\n", 2)[0], "NODE") || !lineHas(ls, id, testkube.NodeName) {
		t.Fatalf("sandbox ls does not name %s's node:\n%s", id, ls)
	}
	cli(t, home, "", "sandbox", "rm", id)
	deadline = time.Now().Add(2 * time.Minute)
	for left := leftoversOf(t, id); len(left) > 0; left = leftoversOf(t, id) {
		if time.Now().After(deadline) {
			t.Fatalf("left on the cluster after the delete: %v", left)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if strings.Contains(out.String(), "Forbidden") || strings.Contains(out.String(), "refused paddock's credentials") {
		t.Errorf("the API server refused the control plane a right:\n%s", out)
	}
}

// lineHas says whether a line of text holds every one of words.
func lineHas(text string, words ...string) bool {
	for _, line := range strings.Split(text, "\n") {
		if !slices.ContainsFunc(words, func(w string) bool { return !strings.Contains(line, w) }) {
			return true
		}
	}
	return false
}

// leftoversOf is what the namespace still holds of sandbox id.
func leftoversOf(t *testing.T, id string) []string {
	var out []string
	for _, o := range kubetest.Leftovers(t) {
		if strings.Contains(o, id) {
			out = append(out, o)
		}
	}
	return out
}

// adminCluster opens the test cluster as its admin, or nil.
func adminCluster(t *testing.T) *kube.Cluster {
	kc := kube.Config{Kubeconfig: testkube.Shared(t).Kubeconfig, Namespace: kubetest.Namespace, Image: kubetest.Image}
	kc.Fill(t.TempDir())
	cl, err := kube.Open(kc, testenv.Logger(t))
	if err != nil {
		t.Log(err)
		return nil
	}
	return cl
}

var warmPoolGVR = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxwarmpools"}

// waitPoolReady waits until the SandboxWarmPool called name has a ready member.
func waitPoolReady(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		wp, err := testkube.Shared(t).Dynamic.Resource(warmPoolGVR).Namespace(kubetest.Namespace).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			if n, _, _ := unstructured.NestedInt64(wp.Object, "status", "readyReplicas"); n > 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the warm pool %s has no ready member: %v", name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// hasClaim says whether sandbox id is a SandboxClaim of a warm pool.
func hasClaim(t *testing.T, id string) bool {
	_, err := testkube.Shared(t).Dynamic.Resource(claimGVR).Namespace(kubetest.Namespace).Get(context.Background(), id, metav1.GetOptions{})
	return err == nil
}

var claimGVR = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxclaims"}

// TestServeOnClusterTemplatePool: pool: {templates: {node: 1}} on a cluster is a
// SandboxWarmPool of the node template's own; its member is claimed from it and readied
// (scaffolded, dependencies fetched through the egress proxy); `paddock app new
// --runtime node` takes its files (a hit), and a sandbox whose policy forbids the
// registry the member fetched from does not (a miss, saying which host). A member an
// earlier control plane left is deleted at start. The control plane holds the shipped
// RBAC alone.
func TestServeOnClusterTemplatePool(t *testing.T) {
	reg := httptest.NewServer((&requestLog{}).wrap(npmregistry.Handler(npmMirror(t))))
	t.Cleanup(reg.Close)
	_, portText, _ := net.SplitHostPort(reg.Listener.Addr().String())
	var port uint16
	fmt.Sscan(portText, &port)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte("network:\n  default: deny\n  allow: [\""+registryHost+"\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{fmt.Sprintf("npm_config_registry=http://%s:%d/", registryHost, port)}
	rc := kubetest.Config(t, testenv.Config(t))
	rc.Cluster.Kubeconfig = shippedRBAC(t)
	c := testkube.Shared(t)
	ctx := context.Background()
	// A member an earlier control plane left (killed before it could discard it): the next
	// one deletes its claim, since members are no one's.
	left := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
		"metadata": map[string]any{"name": "sb-leftmember", "labels": map[string]any{
			kube.LabelManagedBy: kube.ManagedBy, kube.LabelSandbox: "sb-leftmember", kube.LabelPool: "paddock-tmpl-node"}},
		"spec": map[string]any{"warmPoolRef": map[string]any{"name": "paddock-tmpl-node"}},
	}}
	if _, err := c.Dynamic.Resource(claimGVR).Namespace(kubetest.Namespace).Create(ctx, left, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := server.Config{Runner: rc, Listen: "127.0.0.1:0", NetworkPolicy: pol,
		Pool: fleet.PoolConfig{Templates: map[string]int{"node": 1}, Env: env}}
	e := servertest.StartOpts(t, cfg, server.Options{
		AuthOptions: servertest.CheapAuth(),
		Egress: egress.Options{Resolver: loopbackResolver{}, HTTPPorts: []uint16{port},
			UnsafeAllowAddrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, DialTimeout: 5 * time.Second},
	})
	t.Cleanup(func() {
		e.Stop(true)
		if cl := adminCluster(t); cl != nil {
			_ = cl.RemoveTemplatePool(context.Background(), "node")
		}
	})
	waitMetric(t, e, nodePoolSize, 1)
	if _, err := c.Dynamic.Resource(claimGVR).Namespace(kubetest.Namespace).Get(ctx, "sb-leftmember", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the member an earlier control plane left is still claimed: %v", err)
	}
	wp, err := c.Dynamic.Resource(warmPoolGVR).Namespace(kubetest.Namespace).Get(ctx, "paddock-tmpl-node", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the node template's SandboxWarmPool: %v", err)
	}
	if n, _, _ := unstructured.NestedInt64(wp.Object, "spec", "replicas"); n != 1 {
		t.Errorf("the node template's pool keeps %d pods, want 1", n)
	}
	members := func() []string {
		l, err := c.Dynamic.Resource(claimGVR).Namespace(kubetest.Namespace).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelPool + "=paddock-tmpl-node"})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, o := range l.Items {
			names = append(names, o.GetName())
		}
		return names
	}
	held := members()
	if len(held) != 1 {
		t.Fatalf("claims of the node template's pool: %v, want the one member", held)
	}
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "p", Limits: api.Limits{Memory: "1GiB"}}), http.StatusCreated, &sb)
	home := t.TempDir()
	cmd := exec.Command(testenv.Binary(t, "paddock"), "app", "new", "my-site", sb.ID, "--runtime", "node")
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "PADDOCK_SERVER="+e.URL, "PADDOCK_TOKEN="+alice.Token)
	got, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(got), "from the warm pool") || strings.Contains(string(got), "npm install") {
		t.Fatalf("paddock app new --runtime node: %v\n%s", err, got)
	}
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Cwd: "my-site", Argv: []string{"test", "-x", "node_modules/.bin/vite"}}); res.ExitCode != 0 {
		t.Errorf("the project has no vite: %+v", res)
	}
	if m := e.Metrics(t); metricValue(m, nodePoolHits) != 1 || metricValue(m, nodePoolMisses) != 0 {
		t.Errorf("after a claim: hits %v, misses %v", metricValue(m, nodePoolHits), metricValue(m, nodePoolMisses))
	}
	// The member is discarded: its claim goes, and the pool readies another.
	deadline := time.Now().Add(3 * time.Minute)
	for slices.Contains(members(), held[0]) {
		if time.Now().After(deadline) {
			t.Fatalf("the taken member's claim %s is still there", held[0])
		}
		time.Sleep(200 * time.Millisecond)
	}
	waitMetric(t, e, nodePoolSize, 1)

	// A sandbox that may not reach the registry does not take the member's files.
	var other api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "q", Env: env, Limits: api.Limits{Memory: "1GiB"}}), http.StatusCreated, &other)
	servertest.Decode(t, putPolicy(t, alice, other.ID, "application/yaml", "network:\n  default: deny\n  allow: [elsewhere.test]\n"), http.StatusOK, nil)
	evs := providerStep(t, alice, other.ID, "new", api.ProviderRequest{Runtime: "node", Name: "my-site", Dir: "my-site"})
	var errs strings.Builder
	for _, ev := range evs {
		errs.WriteString(ev.Error + "\n")
	}
	if !strings.Contains(errs.String(), "may not reach "+registryHost) || !slices.Contains(ran(evs), "resolve: npm install") {
		t.Fatalf("new node in a sandbox that may not reach the registry: ran %q; errors:\n%s\nlog:\n%s", ran(evs), errs.String(), logText(evs))
	}
	if res := execIn(t, alice, other.ID, api.ExecRequest{Cwd: "my-site", Argv: []string{"test", "-e", "node_modules/.bin/vite"}}); res.ExitCode == 0 {
		t.Errorf("the project has the pool's vite though its sandbox may not reach the registry")
	}
	if m := e.Metrics(t); metricValue(m, nodePoolHits) != 1 || metricValue(m, nodePoolMisses) != 1 {
		t.Errorf("hits %v, misses %v", metricValue(m, nodePoolHits), metricValue(m, nodePoolMisses))
	}
	for _, id := range []string{sb.ID, other.ID} {
		resp := alice.DoToken("DELETE", "/api/v1/sandboxes/"+id, nil)
		resp.Body.Close()
	}
}
