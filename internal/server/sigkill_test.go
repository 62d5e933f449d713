package server_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/testenv"
)

// lockedBuffer collects a process's output line by line while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor waits up to 10 s for s to appear in the output.
func (l *lockedBuffer) waitFor(s string) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(l.String(), s) {
			return true
		}
	}
	return false
}

// serveConfig writes the configuration of a `paddock serve` on this machine's test
// runner (data and state dirs, the agent) and returns its path.
func serveConfig(t *testing.T) string {
	t.Helper()
	testenv.RequireRoot(t)
	rc := testenv.Config(t)
	config := filepath.Join(t.TempDir(), "paddock.yaml")
	yaml := fmt.Sprintf("data_dir: %s\nstate_dir: %s\nagent: %s\n", rc.DataDir, rc.StateDir, rc.Agent)
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return config
}

// startServe runs the real `paddock serve` binary on a free loopback port and waits until
// it answers /healthz. It returns the base URL, the process, and what it printed (its
// standard output, and its log on standard error). args are added to its command line.
func startServe(t *testing.T, config string, args ...string) (string, *exec.Cmd, *lockedBuffer) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd, out, err := startServeAt(t, config, addr, args...)
	if err != nil {
		t.Fatal(err)
	}
	return "http://" + addr, cmd, out
}

// startServeAt is startServe on addr; it returns an error rather than failing the test,
// for a caller off the test's goroutine.
func startServeAt(t *testing.T, config, addr string, args ...string) (*exec.Cmd, *lockedBuffer, error) {
	cmd := exec.Command(testenv.Binary(t, "paddock"), append([]string{"serve", "--config", config, "--listen", addr}, args...)...)
	out := &lockedBuffer{}
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = out
	cmd.WaitDelay = time.Minute // a child left holding stderr does not hold Wait
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			fmt.Fprintln(out, sc.Text())
		}
	}()
	url := "http://" + addr
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(url + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return cmd, out, nil
			}
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, nil, fmt.Errorf("paddock serve did not come up on %s:\n%s", addr, out)
		}
	}
}

// stopServe stops a `paddock serve` process as an operator's SIGTERM does, and kills it
// if it has not exited a minute later: a stop that hangs is said in the test's log rather
// than holding the test binary until its timeout.
func stopServe(t testing.TB, cmd *exec.Cmd) {
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Logf("paddock serve (pid %d) had not exited a minute after SIGTERM: killed", cmd.Process.Pid)
		cmd.Process.Kill()
		<-done
	}
}

// The contract's restart clause, with the real binary: SIGKILL `paddock serve` and start
// it again — the account, its token, its roles and its running sandboxes are all there.
func TestServeSurvivesSIGKILL(t *testing.T) {
	config := serveConfig(t)
	url, cmd, out := startServe(t, config)
	e := &servertest.Env{URL: url}
	alice := e.Register(t, "alice")
	var roles api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
	if !out.waitFor("First start: created the admin account") {
		t.Errorf("the first start did not print the admin's password:\n%s", out)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	url2, cmd2, out2 := startServe(t, config)
	t.Cleanup(func() {
		// A clean stop leaves sandboxes running by design; this test removes them.
		for _, id := range []string{roles.Live.ID, roles.Dev.ID} {
			req, _ := http.NewRequest("DELETE", url2+"/api/v1/sandboxes/"+id, nil)
			req.Header.Set("Authorization", "Bearer "+alice.Token)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
		cmd2.Process.Signal(syscall.SIGTERM)
		cmd2.Wait()
	})
	alice.Base = url2
	var after api.Roles
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/roles", nil), http.StatusOK, &after)
	if after.Live.ID != roles.Live.ID || after.Live.State != api.StateRunning {
		t.Errorf("after SIGKILL: live %s %s, want %s running", after.Live.ID, after.Live.State, roles.Live.ID)
	}
	if strings.Contains(out2.String(), "First start") {
		t.Errorf("the second start made another admin:\n%s", out2)
	}
	// The adopted live sandbox serves through the new process's proxy, with the old cookie.
	resp := alice.App("GET", "/api/info", nil)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get(api.HeaderSandbox) != roles.Live.ID {
		t.Errorf("GET /api/info after SIGKILL: %d from %q", resp.StatusCode, resp.Header.Get(api.HeaderSandbox))
	}
}

// SIGHUP makes `paddock serve` read its policy files again; a broken one is logged and
// leaves the server serving with the last good version.
func TestServeReloadsOnSIGHUP(t *testing.T) {
	testenv.RequireRoot(t)
	rc := testenv.Config(t)
	dir := t.TempDir()
	config, brk := filepath.Join(dir, "paddock.yaml"), filepath.Join(dir, "broker.yaml")
	writeFile(t, brk, "capabilities:\n  github: {secrets: [github_token]}\n")
	yaml := fmt.Sprintf("data_dir: %s\nstate_dir: %s\nagent: %s\nbroker_policy: %s\n", rc.DataDir, rc.StateDir, rc.Agent, brk)
	writeFile(t, config, yaml)
	url, cmd, out := startServe(t, config)
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	if !out.waitFor(fmt.Sprintf("kill -HUP %d", cmd.Process.Pid)) {
		t.Errorf("the banner does not say how to reload:\n%s", out)
	}
	writeFile(t, brk, "capabilities:\n  gitlab: {secrets: [gitlab_token]}\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if !out.waitFor(`msg="reload: policy files read again" changed=[broker_policy]`) {
		t.Fatalf("no reload after SIGHUP:\n%s", out)
	}
	writeFile(t, brk, "capabilities: [\n")
	cmd.Process.Signal(syscall.SIGHUP)
	if !out.waitFor("its last good version stays in force") {
		t.Fatalf("a broken policy file was not reported at SIGHUP:\n%s", out)
	}
	resp, err := http.Get(url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/healthz after a failed reload: %d", resp.StatusCode)
	}
}
