package server_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/browsertest"
	"github.com/paddockhq/paddock/internal/servertest"
)

// The desktop open in a browser while `paddock serve` is SIGKILLed and started again on
// the same data dir and port: the page stays signed in and carries on by itself, its next
// save reaches the disk, its terminal tab reattaches to the same shell and a new terminal
// works (tests/browser/desktop-restart.mjs).
func TestBrowserDesktopSurvivesSIGKILL(t *testing.T) {
	config := serveConfig(t)
	url, cmd, _ := startServe(t, config)
	e := &servertest.Env{URL: url}
	alice := e.Register(t, "alice")
	alice.Start()
	var roles api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
	var mu sync.Mutex
	current := cmd
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range []string{roles.Live.ID, roles.Dev.ID} {
			req, _ := http.NewRequest("DELETE", url+"/api/v1/sandboxes/"+id, nil)
			req.Header.Set("Authorization", "Bearer "+alice.Token)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
		current.Process.Signal(syscall.SIGTERM)
		current.Wait()
	})

	signals := t.TempDir()
	restarted := make(chan error, 1)
	go func() {
		// Bound by the script's progress: it asks for the kill once its state is made.
		for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(signals, "ready")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				restarted <- fmt.Errorf("the page never got ready for the SIGKILL")
				return
			}
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			restarted <- err
			return
		}
		cmd.Wait()
		cmd2, _, err := startServeAt(t, config, strings.TrimPrefix(url, "http://"))
		if err != nil {
			restarted <- err
			return
		}
		mu.Lock()
		current = cmd2
		mu.Unlock()
		restarted <- os.WriteFile(filepath.Join(signals, "restarted"), nil, 0o600)
	}()
	env := map[string]string{
		"BASE_URL": url, "USERNAME": "alice", "PASSWORD": "correct horse battery alice",
		"SANDBOX": roles.Live.ID, "SIGNAL_DIR": signals,
	}
	if d := os.Getenv("SCREENSHOT_DIR"); d != "" {
		env["SCREENSHOT_DIR"] = d
	}
	out := browsertest.RunFor(t, "desktop-restart", env, 4*time.Minute)
	if err := <-restarted; err != nil {
		t.Fatalf("restarting paddock: %v\n%s", err, out)
	}
	t.Log(out)
	resp := alice.DoToken("GET", "/api/v1/sandboxes/"+roles.Live.ID+"/files/content?path=restart.txt", nil)
	got := readBody(t, resp)
	if resp.StatusCode != http.StatusOK || got != "after\n" {
		t.Errorf("restart.txt after the restart: %s %q, want %q", resp.Status, got, "after\n")
	}
}
