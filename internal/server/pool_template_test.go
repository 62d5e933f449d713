package server_test

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
)

const (
	nodePoolSize   = `paddock_pool_size{template="node"}`
	nodePoolHits   = `paddock_pool_claims_total{result="hit",template="node"}`
	nodePoolMisses = `paddock_pool_claims_total{result="miss",template="node"}`
)

// waitMetric waits until the metric is v.
func waitMetric(t *testing.T, e *servertest.Env, metric string, v float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for metricValue(e.Metrics(t), metric) != v {
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached %v:\n%s", metric, v, e.Logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A new node project takes the template pool's resolved dependencies instead of running
// npm: its scaffold is its own (its name), and the dependencies work (Vite builds it)
// in a sandbox whose npm knows no registry it may reach. The member is discarded.
func TestPoolTemplateNode(t *testing.T) {
	e, _, _ := startWithRegistryConfig(t, func(c *server.Config, env []string) {
		c.Pool = fleet.PoolConfig{Templates: map[string]int{"node": 1}, Env: env}
	})
	waitMetric(t, e, nodePoolSize, 1)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	// No registry in its environment: npm here would fail.
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "p", Limits: api.Limits{Memory: "1GiB"}}), http.StatusCreated, &sb)
	evs := providerStep(t, alice, sb.ID, "new", api.ProviderRequest{Runtime: "node", Name: "my-site", Dir: "my-site"})
	if r := result(evs); r.Error != "" || !slices.Contains(ran(evs), "resolve: from the warm pool") || slices.Contains(ran(evs), "resolve: npm install") {
		t.Fatalf("new node from the pool: ran %q, result %+v; log:\n%s", ran(evs), r, logText(evs))
	}
	res := execIn(t, alice, sb.ID, api.ExecRequest{Cwd: "my-site", TimeoutMS: 300_000, Argv: []string{"sh", "-c",
		"node_modules/.bin/vite build >&2 && cat dist/index.html && grep '\"name\"' package.json && ls -d src"}})
	if res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "<title>my-site</title>") || !strings.Contains(string(res.Stdout), `"name": "my-site"`) {
		t.Fatalf("vite build of the pooled project: %+v\n%s", res, res.Stderr)
	}
	if m := e.Metrics(t); metricValue(m, nodePoolHits) != 1 || metricValue(m, nodePoolMisses) != 0 {
		t.Errorf("after a claim: hits %v, misses %v", metricValue(m, nodePoolHits), metricValue(m, nodePoolMisses))
	}
	if !strings.Contains(e.Logs.String(), "its project was taken") {
		t.Errorf("the member was not discarded after its claim:\n%s", e.Logs)
	}
}

// A template pool whose members cannot be readied (their registry is refused) holds none,
// and a new project resolves its dependencies the usual way: a miss.
func TestPoolTemplateMiss(t *testing.T) {
	e, env, _ := startWithRegistryConfig(t, func(c *server.Config, env []string) {
		c.Pool = fleet.PoolConfig{Templates: map[string]int{"node": 1}, Env: []string{strings.Replace(env[0], registryHost, "elsewhere.npm.test", 1)}}
	})
	deadline := time.Now().Add(5 * time.Minute)
	for !strings.Contains(e.Logs.String(), "could not be readied") {
		if time.Now().After(deadline) {
			t.Fatalf("the member was never refused:\n%s", e.Logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "p", Env: env, Limits: api.Limits{Memory: "1GiB"}}), http.StatusCreated, &sb)
	evs := providerStep(t, alice, sb.ID, "new", api.ProviderRequest{Runtime: "node", Name: "my-site", Dir: "my-site"})
	if r := result(evs); r.Error != "" || !slices.Contains(ran(evs), "resolve: npm install") {
		t.Fatalf("new node without a pooled member: ran %q, result %+v; log:\n%s", ran(evs), r, logText(evs))
	}
	if m := e.Metrics(t); metricValue(m, nodePoolHits) != 0 || metricValue(m, nodePoolMisses) != 1 || metricValue(m, nodePoolSize) != 0 {
		t.Errorf("hits %v, misses %v, size %v", metricValue(m, nodePoolHits), metricValue(m, nodePoolMisses), metricValue(m, nodePoolSize))
	}
}

// A template pool's member whose agent dies while it waits is never handed out: a new
// project takes another member or resolves itself, and works either way.
func TestPoolTemplateDeadMember(t *testing.T) {
	e, env, _ := startWithRegistryConfig(t, func(c *server.Config, env []string) {
		c.Pool = fleet.PoolConfig{Templates: map[string]int{"node": 1}, Env: env}
	})
	waitMetric(t, e, nodePoolSize, 1)
	members := waitPoolDirs(t, e)
	if len(members) != 1 {
		t.Fatalf("the pool holds %v", members)
	}
	dead := members[0]
	pid := initPid(t, e, dead)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "p", Env: env, Limits: api.Limits{Memory: "1GiB"}}), http.StatusCreated, &sb)
	evs := providerStep(t, alice, sb.ID, "new", api.ProviderRequest{Runtime: "node", Name: "my-site", Dir: "my-site"})
	if r := result(evs); r.Error != "" {
		t.Fatalf("new node: ran %q, result %+v; log:\n%s", ran(evs), r, logText(evs))
	}
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Cwd: "my-site", Argv: []string{"test", "-x", "node_modules/.bin/vite"}}); res.ExitCode != 0 {
		t.Errorf("the project has no vite: %+v", res)
	}
	logs := e.Logs.String()
	if regexp.MustCompile(`sandbox=` + dead + ` template=node why="its project was taken"`).MatchString(logs) {
		t.Errorf("the dead member %s was handed out:\n%s", dead, logs)
	}
	if !regexp.MustCompile(`discarding a sandbox.*sandbox=` + dead + `.*agent exited`).MatchString(logs) {
		t.Errorf("the dead member %s was not discarded:\n%s", dead, logs)
	}
}

// waitPoolDirs is the IDs of the sandboxes the pool's directory holds.
func waitPoolDirs(t *testing.T, e *servertest.Env) []string {
	t.Helper()
	names, err := os.ReadDir(filepath.Join(e.Config.Runner.WorkspaceRoot, ".pool", "history"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, n := range names {
		ids = append(ids, n.Name())
	}
	return ids
}

// A sandbox whose own policy refuses the registry a member's dependencies came from does
// not take them: the step says which host, resolves itself (under its own policy), and
// the claim is a miss.
func TestPoolTemplateRefusedByPolicy(t *testing.T) {
	e, env, _ := startWithRegistryConfig(t, func(c *server.Config, env []string) {
		c.Pool = fleet.PoolConfig{Templates: map[string]int{"node": 1}, Env: env}
	})
	waitMetric(t, e, nodePoolSize, 1)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "p", Env: env, Limits: api.Limits{Memory: "1GiB"}}), http.StatusCreated, &sb)
	servertest.Decode(t, putPolicy(t, alice, sb.ID, "application/yaml", "network:\n  default: deny\n  allow: [elsewhere.test]\n"), http.StatusOK, nil)
	evs := providerStep(t, alice, sb.ID, "new", api.ProviderRequest{Runtime: "node", Name: "my-site", Dir: "my-site"})
	var errs strings.Builder
	for _, ev := range evs {
		errs.WriteString(ev.Error + "\n")
	}
	if !strings.Contains(errs.String(), "may not reach "+registryHost) || !slices.Contains(ran(evs), "resolve: npm install") {
		t.Fatalf("new node in a sandbox that may not reach the registry: ran %q; errors:\n%s\nlog:\n%s", ran(evs), errs.String(), logText(evs))
	}
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Cwd: "my-site", Argv: []string{"test", "-e", "node_modules/.bin/vite"}}); res.ExitCode == 0 {
		t.Errorf("the project has the pool's vite though its sandbox may not reach the registry")
	}
	if m := e.Metrics(t); metricValue(m, nodePoolHits) != 0 || metricValue(m, nodePoolMisses) != 1 {
		t.Errorf("hits %v, misses %v", metricValue(m, nodePoolHits), metricValue(m, nodePoolMisses))
	}
}
