package server_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/wire"
)

// A sandbox's app is reported as its agent sees it: a crashing app shows as backoff with
// how it ended and what it printed, and does not hold its sandbox's start for the whole
// wait for an app to listen; a healthy one shows as running, with what it prints as it
// runs; another user's is not found.
func TestAppStatus(t *testing.T) {
	e := servertest.Start(t)
	alice, bob := e.Register(t, "alice"), e.Register(t, "bob")

	start := time.Now()
	var broken api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "broken",
		App: api.Template{Command: []string{"sh", "-c", "echo boom; exit 3"}, Port: 8080}}), http.StatusCreated, &broken)
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("creating a sandbox whose app crashes took %s: the start waited out the app's listen timeout", took)
	}
	var st api.AppStatus
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st = api.AppStatus{}
		servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+broken.ID+"/app", nil), http.StatusOK, &st)
		if st.State == "backoff" && st.LastExit != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("app of a crashing sandbox: %+v, want backoff with its last exit", st)
		}
	}
	if st.LastExit.ExitCode != 3 || !strings.Contains(st.LastOutput, "boom") || st.NextStart == nil {
		t.Errorf("crashed app: %+v (exit %+v), want exit 3, its output, and when it starts again", st, st.LastExit)
	}

	var ok api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "ok"}), http.StatusCreated, &ok)
	var healthy api.AppStatus
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+ok.ID+"/app", nil), http.StatusOK, &healthy)
	if healthy.State != "running" || healthy.LastExit != nil || healthy.Restarts != 0 {
		t.Errorf("healthy app: %+v, want running, never exited", healthy)
	}
	// The running app's output: the welcome app (paddock's own) says it serves, and echoes
	// nothing of the environment paddock gives it.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(healthy.Output, "welcome app serving"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("healthy app's output %q, want what the running app printed", healthy.Output)
		}
		healthy = api.AppStatus{}
		servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+ok.ID+"/app", nil), http.StatusOK, &healthy)
	}
	if healthy.OutputTruncated || healthy.LastOutput != "" {
		t.Errorf("healthy app: %+v, want its whole output and no last run's", healthy)
	}
	env := execOK(t, alice, ok.ID, "env")
	for _, kv := range strings.Split(env, "\n") {
		k, v, _ := strings.Cut(kv, "=")
		if strings.Contains(k, "KEY") || strings.Contains(k, "TOKEN") || strings.Contains(k, "SECRET") {
			if v != "" && strings.Contains(healthy.Output, v) {
				t.Errorf("the app's output echoes $%s", k)
			}
		}
	}
	servertest.Decode(t, bob.DoToken("GET", "/api/v1/sandboxes/"+ok.ID+"/app", nil), http.StatusNotFound, nil)
}

// A proxied request that arrives while its role's sandbox is starting waits for the app
// to listen, like the request that started it, rather than meeting a refused port: a
// browser's first page and its favicon race exactly so (TestBrowserNewcomer once got a
// 502 this way).
func TestProxyWaitsForAStartingApp(t *testing.T) {
	slow := "sleep 1.5; exec " + strings.Join(wire.WelcomeCommand(wire.AgentPath, 8080), " ")
	e := servertest.Start(t, func(c *server.Config) {
		c.App = server.AppConfig{Command: []string{"sh", "-c", slow}, Port: 8080, Build: "slow"}
	})
	alice := e.Register(t, "alice")
	answers := make(chan string, 3)
	for i := range 3 {
		go func() {
			// The first request makes and starts the live sandbox; the later ones arrive
			// while it waits for the app.
			time.Sleep(time.Duration(i) * 400 * time.Millisecond)
			resp := alice.AppToken(alice.AppURL("live"), "GET", "/", nil)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				answers <- fmt.Sprintf("request %d: %d %s", i, resp.StatusCode, body)
				return
			}
			answers <- ""
		}()
	}
	for range 3 {
		if a := <-answers; a != "" {
			t.Errorf("during the live sandbox's start, %s; want 200 once the app listens", a)
		}
	}
}
