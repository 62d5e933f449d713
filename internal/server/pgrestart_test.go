package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/store/pgtest"
	"github.com/paddockhq/paddock/internal/testenv"
)

// pgLoad writes secrets through the API from a few clients until stopped, and keeps what
// every request got.
type pgLoad struct {
	base, token string
	http        *http.Client

	mu      sync.Mutex
	acked   map[string]int64 // PUTs that answered 200, by secret
	failed  []string         // what every other answer was, when it was not a 503 naming the database
	n503    atomic.Int64
	nOK     atomic.Int64
	slowest time.Duration
}

func (l *pgLoad) put(name string) {
	body, _ := json.Marshal(api.PutSecretRequest{Value: "v-" + name})
	req, _ := http.NewRequest("PUT", l.base+"/api/v1/me/secrets/"+name, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+l.token)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := l.http.Do(req)
	took := time.Since(start)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.slowest = max(l.slowest, took)
	if err != nil {
		l.failed = append(l.failed, fmt.Sprintf("%s: %v", name, err))
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e api.Error
	switch {
	case resp.StatusCode == http.StatusOK:
		l.acked[name]++
		l.nOK.Add(1)
	case resp.StatusCode == http.StatusServiceUnavailable && json.Unmarshal(b, &e) == nil &&
		e.Error.Code == api.CodeUnavailable && strings.Contains(e.Error.Message, "database"):
		l.n503.Add(1)
	default:
		l.failed = append(l.failed, fmt.Sprintf("%s: %d %s", name, resp.StatusCode, b))
	}
}

func (l *pgLoad) broken() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.failed) > 0
}

// waitFor waits, by progress, until cond holds; the deadline only catches a hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

// PostgreSQL stopped under a load of API writes (fast, then immediate) and started
// again: while it is away every request fails with 503 naming the database, and
// /healthz says so; nothing acknowledged is lost; the same `paddock serve` serves again
// by itself once it is back.
func TestPostgresRestartUnderLoad(t *testing.T) {
	testenv.RequireRoot(t)
	pg := pgtest.StartOwn(t)
	rc := testenv.Config(t)
	config := filepath.Join(t.TempDir(), "paddock.yaml")
	yaml := fmt.Sprintf("data_dir: %s\nstate_dir: %s\nagent: %s\n", rc.DataDir, rc.StateDir, rc.Agent)
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	url, cmd, out := startServe(t, config, "--store", pg.URL())
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	alice := (&servertest.Env{URL: url}).Register(t, "alice")
	load := &pgLoad{base: url, token: alice.Token, http: &http.Client{Timeout: 2 * time.Minute}, acked: map[string]int64{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				load.put(fmt.Sprintf("w%d-%d", g, i%20)) // a user may have 100 secrets
			}
		}()
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopLoad()

	for _, mode := range []string{"fast", "immediate"} {
		ok := load.nOK.Load()
		waitFor(t, "writes before the stop", func() bool { return load.nOK.Load() >= ok+20 || load.broken() })
		if load.broken() {
			t.Fatalf("writes failed with the database up: %v", load.failed[:1])
		}
		if err := pg.Stop(mode); err != nil {
			t.Fatal(err)
		}
		fails := load.n503.Load()
		waitFor(t, "503s while PostgreSQL is away", func() bool { return load.n503.Load() >= fails+20 })
		var h api.Health
		resp, err := http.Get(url + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&h)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(h.Checks["store"], "database") {
			t.Errorf("stop %s: /healthz %d %+v, want 503 saying the database is unreachable", mode, resp.StatusCode, h)
		}
		// A request whose token was read just before the stop is authenticated from the
		// token cache until its entry is due to be read again: it may then be answered
		// (/me needs nothing else) or refused for the token's scope (/tokens) before 503s
		// come; nothing else but a 503 naming the database, and the 503 must come.
		for _, path := range []string{"/api/v1/me", "/api/v1/me/secrets", "/api/v1/sandboxes", "/api/v1/tokens", "/api/v1/roles", "/api/v1/events"} {
			waitFor(t, "GET "+path+" to answer 503 naming the database", func() bool {
				req, _ := http.NewRequest("GET", url+path, nil)
				req.Header.Set("Authorization", "Bearer "+alice.Token)
				resp, err := load.http.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				var e api.Error
				json.NewDecoder(resp.Body).Decode(&e)
				resp.Body.Close()
				switch {
				case resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(e.Error.Message, "database"):
					return true
				case path == "/api/v1/me" && resp.StatusCode == http.StatusOK,
					path == "/api/v1/tokens" && resp.StatusCode == http.StatusForbidden && e.Error.Code == "permission_denied":
					return false // from the token cache
				}
				t.Fatalf("stop %s: GET %s: %d %+v, want 503 naming the database", mode, path, resp.StatusCode, e.Error)
				return false
			})
		}
		if err := pg.Start(); err != nil {
			t.Fatal(err)
		}
		ok = load.nOK.Load()
		waitFor(t, "writes after PostgreSQL is back", func() bool { return load.nOK.Load() >= ok+20 })
	}
	stopLoad()

	load.mu.Lock()
	defer load.mu.Unlock()
	if len(load.failed) > 0 {
		t.Errorf("%d requests failed otherwise than 503 naming the database, e.g. %v\nserver:\n%s", len(load.failed), load.failed[:min(5, len(load.failed))], out)
	}
	var list api.SecretList
	alice.MustJSON("GET", "/api/v1/me/secrets", nil, http.StatusOK, &list)
	// Each PUT that answered 200 bumped its secret's version; one that answered 503 may
	// or may not have.
	have := map[string]int64{}
	for _, s := range list.Secrets {
		have[s.Name] = s.Version
	}
	acked := 0
	for name, n := range load.acked {
		acked += int(n)
		if have[name] < n {
			t.Errorf("secret %s: %d PUTs acknowledged, version %d: some are lost", name, n, have[name])
		}
	}
	t.Logf("%d writes acknowledged, %d refused with 503, slowest answer %v", acked, load.n503.Load(), load.slowest)
	if resp, err := http.Get(url + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz after the restarts: %v %v", resp, err)
	}
}
