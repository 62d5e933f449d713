package main_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/testenv"
)

// heavy are packages of the control plane whose initialisers (client-go's schemes,
// minio's regular expressions, zxcvbn's tables, the database drivers, Prometheus) would
// run at every start of paddock; paddock-server links them.
var heavy = []string{
	"k8s.io/client-go", "k8s.io/api", "k8s.io/apimachinery", "sigs.k8s.io/agent-sandbox",
	"github.com/minio/minio-go", "github.com/jackc/pgx", "github.com/trustelem/zxcvbn",
	"github.com/prometheus/client_golang", "modernc.org/sqlite",
	"golang.org/x/net/trace", "html/template",
	"github.com/paddockhq/paddock/internal/server", "github.com/paddockhq/paddock/internal/store",
	"github.com/paddockhq/paddock/internal/sandbox/kube",
}

// paddock, as make build builds it, links none of the heavy packages.
func TestLean(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-tags", "grpcnotrace", ".")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, h := range heavy {
			if pkg == h || strings.HasPrefix(pkg, h+"/") {
				t.Errorf("cmd/paddock links %s (from %s): a command that needs it belongs in paddock-server (cli.HostedCommands)", pkg, h)
			}
		}
	}
}

// A hosted command runs in paddock-server beside paddock, with paddock's arguments; without
// paddock-server there, it fails saying so.
func TestHostedCommands(t *testing.T) {
	bin := testenv.Binary(t, "paddock")
	for _, tc := range []struct {
		args []string
		want string // on stdout and stderr
		code int
	}{
		{[]string{"serve", "--help"}, "--listen", 0},
		{[]string{"admin", "backup", "--help"}, "--keys", 0},
		{[]string{"secrets", "rotate-key", "--data", t.TempDir()}, "no paddock database at", 125},
		{[]string{"sandbox", "capability", "rotate-key", "--help"}, "capability.keys", 0},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, err := exec.Command(bin, tc.args...).CombinedOutput()
			if code := exitCode(err); code != tc.code || !strings.Contains(string(out), tc.want) {
				t.Errorf("paddock %s: exit %d, output %q; want exit %d and %q", strings.Join(tc.args, " "), code, out, tc.code, tc.want)
			}
		})
	}
	alone := filepath.Join(t.TempDir(), "paddock")
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, data, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(alone, "serve").CombinedOutput()
	if code := exitCode(err); code != 125 || !strings.Contains(string(out), "paddock serve runs in paddock-server, which is not beside "+alone) {
		t.Errorf("paddock serve without paddock-server: exit %d, %q", code, out)
	}
	if out, err := exec.Command(alone, "version").CombinedOutput(); err != nil {
		t.Errorf("paddock version without paddock-server: %v, %q", err, out)
	}
}

// paddock run on a cluster runs in paddock-server, which links the Kubernetes backend:
// with the API server down, it says that the server is unreachable.
func TestRunOnClusterInServer(t *testing.T) {
	bin := testenv.Binary(t, "paddock")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://%s", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, addr)
	config := filepath.Join(dir, "config.yaml")
	conf := fmt.Sprintf("data_dir: %s\nstate_dir: %s\nrunner: {backend: kubernetes, kubeconfig: %s, image: paddock/agent:test}\n",
		filepath.Join(dir, "data"), filepath.Join(dir, "state"), kubeconfig)
	for name, data := range map[string]string{kubeconfig: kc, config: conf} {
		if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(bin, "run", "--config", config, "--", "true").CombinedOutput()
	if code := exitCode(err); code != 125 || !strings.Contains(string(out), "unreachable") || !strings.Contains(string(out), addr) {
		t.Errorf("paddock run on a cluster that is down: exit %d, %q; want 125, saying %s is unreachable", code, out, addr)
	}
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
