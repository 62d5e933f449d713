package server_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/testenv"
)

// HOME and the caches are on the user's shared disk, not on /tmp: bound into each of the
// user's sandboxes, never into another user's, and counted against a disk of its own
// whose limit a command that meets it names.
func TestSharedDisk(t *testing.T) {
	cfg := testenv.Config(t)
	cfg.SharedDisk = 32 << 20
	e := servertest.StartOpts(t, server.Config{Runner: cfg, Listen: "127.0.0.1:0"}, server.Options{AuthOptions: servertest.CheapAuth()})
	alice, bob := e.Register(t, "alice"), e.Register(t, "bob")
	mk := func(c *servertest.Client, name string) string {
		var sb api.Sandbox
		servertest.Decode(t, c.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: name}), http.StatusCreated, &sb)
		return sb.ID
	}
	a1, a2, b1 := mk(alice, "a1"), mk(alice, "a2"), mk(bob, "b1")

	env := execOK(t, alice, a1, "sh", "-c", `echo "$HOME $CARGO_HOME $GOMODCACHE $npm_config_cache"; stat -f -c %T "$HOME"; echo mine > "$HOME/note"`)
	if !strings.HasPrefix(env, "/shared/home /shared/cache/cargo /shared/cache/go/mod /shared/cache/npm\n") || strings.Contains(env, "tmpfs") {
		t.Errorf("HOME and the caches: %q, want them under /shared, not on a tmpfs", env)
	}
	if got := execOK(t, alice, a2, "cat", "/shared/home/note"); got != "mine\n" {
		t.Errorf("alice's second sandbox reads %q from the shared HOME", got)
	}
	if got := execOK(t, bob, b1, "sh", "-c", "ls -A /shared/home; echo end"); got != "end\n" {
		t.Errorf("bob's sandbox sees %q in its HOME, want an empty one of its own", got)
	}

	var res api.ExecResult
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+a1+"/exec", api.ExecRequest{
		Argv: []string{"sh", "-c", "dd if=/dev/zero of=$HOME/big bs=1M count=64"}}), http.StatusOK, &res)
	if res.ExitCode == 0 || res.Limit != api.LimitDisk || !strings.Contains(res.Error, "shared disk") {
		t.Errorf("filling the shared disk: exit %d, limit %q, %q; want the shared disk named", res.ExitCode, res.Limit, res.Error)
	}
	if got := execOK(t, bob, b1, "sh", "-c", "df -P /shared | tail -1"); strings.Contains(got, " 100% ") {
		t.Errorf("bob's shared disk is full after alice filled hers: %q", got)
	}

	// A control plane started again adopts the sandbox with its shared disk: the limit is
	// still named.
	e.Stop(false)
	second := servertest.StartWith(t, e.Config)
	alice.Base = second.URL
	res = api.ExecResult{}
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+a1+"/exec", api.ExecRequest{
		Argv: []string{"sh", "-c", "dd if=/dev/zero of=$HOME/big2 bs=1M count=64"}}), http.StatusOK, &res)
	if res.ExitCode == 0 || res.Limit != api.LimitDisk || !strings.Contains(res.Error, "shared disk") {
		t.Errorf("filling the shared disk after a restart: exit %d, limit %q, %q; want the shared disk named", res.ExitCode, res.Limit, res.Error)
	}
}

// requestLog counts the requests a registry serves, by path.
type requestLog struct {
	mu    sync.Mutex
	paths []string
}

func (l *requestLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.paths = append(l.paths, r.URL.Path)
		l.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

// tarballs is how many package tarballs were fetched since the last call.
func (l *requestLog) tarballs() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, p := range l.paths {
		if strings.HasSuffix(p, ".tgz") {
			n++
		}
	}
	l.paths = nil
	return n
}

// A user's second sandbox installs from the npm cache the first one filled, on the shared
// disk: the registry serves it no tarball. Another user's sandbox has a cache of its own,
// cold.
func TestSharedCacheWarm(t *testing.T) {
	e, env, reg := startWithRegistryLog(t)
	alice, bob := e.Register(t, "alice"), e.Register(t, "bob")
	install := func(c *servertest.Client, name string) int {
		t.Helper()
		var sb api.Sandbox
		servertest.Decode(t, c.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: name, Env: env,
			Limits: api.Limits{Memory: "1GiB"}}), http.StatusCreated, &sb)
		reg.tarballs()
		evs := providerStep(t, c, sb.ID, "new", api.ProviderRequest{Runtime: "node", Name: "my-site", Dir: "my-site"})
		if r := result(evs); r.Error != "" {
			t.Fatalf("new node in %s: %+v; log:\n%s", name, r, logText(evs))
		}
		return reg.tarballs()
	}
	if n := install(alice, "a1"); n == 0 {
		t.Fatal("alice's first install fetched no tarball: the registry's log is not the one npm used")
	}
	if n := install(alice, "a2"); n != 0 {
		t.Errorf("alice's second sandbox fetched %d tarballs, want none: its npm cache is not the first one's", n)
	}
	if n := install(bob, "b1"); n == 0 {
		t.Error("bob's sandbox fetched no tarball: it used alice's npm cache")
	}
}

// A shared disk the host cannot take (past the disk reserve) costs the caches, not the
// sandbox: it starts with HOME in /tmp.
func TestSharedDiskTooLarge(t *testing.T) {
	cfg := testenv.Config(t)
	cfg.SharedDisk = 1 << 50
	e := servertest.StartOpts(t, server.Config{Runner: cfg, Listen: "127.0.0.1:0"}, server.Options{AuthOptions: servertest.CheapAuth()})
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "p"}), http.StatusCreated, &sb)
	if got := execOK(t, alice, sb.ID, "sh", "-c", `echo "$HOME"`); got != "/tmp\n" {
		t.Errorf("HOME without a shared disk: %q, want /tmp", got)
	}
	if !strings.Contains(e.Logs.String(), "starts without its user's shared disk") {
		t.Error("the log does not say the sandbox started without its shared disk")
	}
}
