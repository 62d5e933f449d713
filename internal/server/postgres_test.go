package server_test

import (
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/store/pgtest"
	"github.com/paddockhq/paddock/internal/testenv"
)

// TestMain stops the PostgreSQL server the tests started, if any.
// runTests runs the package's tests; under the kube build tag it also starts and stops the
// test cluster (cluster_kube_test.go).
var runTests = (*testing.M).Run

func TestMain(m *testing.M) {
	code := runTests(m)
	pgtest.Stop()
	os.Exit(code)
}

// The real `paddock serve --store postgres://...`: an account, its roles' sandboxes, an
// exec, a promotion and a restart work as on SQLite, and the state is in PostgreSQL (the
// data dir has no SQLite database).
func TestServeOnPostgres(t *testing.T) {
	testenv.RequireRoot(t)
	dbURL := pgtest.URL(t)
	rc := testenv.Config(t)
	config := filepath.Join(t.TempDir(), "paddock.yaml")
	yaml := fmt.Sprintf("data_dir: %s\nstate_dir: %s\nagent: %s\n", rc.DataDir, rc.StateDir, rc.Agent)
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	url, cmd, out := startServe(t, config, "--store", dbURL)
	var roles api.Roles
	var alice *servertest.Client
	// The sandboxes go through the serve running at the end (the second one after the
	// restart), before it stops: a stopped serve leaves its sandboxes running.
	serving := cmd
	t.Cleanup(func() {
		if alice != nil {
			for _, id := range []string{roles.Live.ID, roles.Dev.ID} {
				req, _ := http.NewRequest("DELETE", alice.Base+"/api/v1/sandboxes/"+id, nil)
				req.Header.Set("Authorization", "Bearer "+alice.Token)
				if resp, err := http.DefaultClient.Do(req); err != nil {
					t.Errorf("delete sandbox %s: %v", id, err)
				} else if resp.Body.Close(); resp.StatusCode != http.StatusNoContent {
					t.Errorf("delete sandbox %s: %s", id, resp.Status)
				}
			}
		}
		if serving != nil {
			serving.Process.Signal(syscall.SIGTERM)
			serving.Wait()
		}
	})
	if !out.waitFor("backend=postgres") || !out.waitFor("(PostgreSQL database postgres://") {
		t.Errorf("serve did not log nor print its store as postgres:\n%s", out)
	}
	e := &servertest.Env{URL: url}
	alice = e.Register(t, "alice")
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
	if roles.Live.ID == "" || roles.Dev.ID == "" {
		t.Fatalf("roles %+v: want a live and a dev sandbox", roles)
	}
	if res := execIn(t, alice, roles.Dev.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo dev > f && cat f"}}); string(res.Stdout) != "dev\n" {
		t.Errorf("exec in dev: %+v", res)
	}
	var after api.Roles
	alice.MustJSON("POST", "/api/v1/promote", nil, http.StatusOK, &after)
	if after.Live.ID != roles.Dev.ID || after.Dev.ID != roles.Live.ID {
		t.Errorf("after promote: live %s dev %s, want %s and %s", after.Live.ID, after.Dev.ID, roles.Dev.ID, roles.Live.ID)
	}

	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var live string
	var generation int
	if err := db.QueryRow(`SELECT r.live_id, r.generation FROM roles r JOIN users u ON u.id = r.user_id WHERE u.username = 'alice'`).
		Scan(&live, &generation); err != nil || live != roles.Dev.ID || generation != 1 {
		t.Errorf("PostgreSQL holds alice's live %s at generation %d (%v), want %s at 1", live, generation, err, roles.Dev.ID)
	}
	if _, err := os.Stat(filepath.Join(rc.DataDir, "paddock.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the data dir has a SQLite database (%v): the store should be PostgreSQL alone", err)
	}

	// A restart finds everything in PostgreSQL: the token, the roles as promoted.
	serving = nil
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	url2, cmd2, _ := startServe(t, config, "--store", dbURL)
	serving = cmd2
	alice.Base = url2
	var again api.Roles
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/roles", nil), http.StatusOK, &again)
	if again.Live.ID != roles.Dev.ID || again.Live.State != api.StateRunning {
		t.Errorf("after restart: live %s %s, want %s running", again.Live.ID, again.Live.State, roles.Dev.ID)
	}
	if res := execIn(t, alice, again.Live.ID, api.ExecRequest{Argv: []string{"cat", "f"}}); string(res.Stdout) != "dev\n" {
		t.Errorf("exec in live after restart: %+v", res)
	}
}

// A store setting that is not a PostgreSQL URL is refused by name, and a password in it
// is never repeated.
func TestStoreSettingChecked(t *testing.T) {
	for _, bad := range []string{"mysql://u:hunter2@db/x", "/var/lib/paddock/other.db", "postgres://u:hunter2@db:notaport/x"} {
		err := server.CheckStore(bad)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "store") {
			t.Errorf("CheckStore(%q) = %v, want ErrInvalidArgument naming store", bad, err)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("CheckStore(%q) = %v: repeats the password", bad, err)
		}
	}
	for _, good := range []string{"", "postgres://paddock@db.example.com/paddock", "postgresql://p:s@/paddock?host=/run/postgresql"} {
		if err := server.CheckStore(good); err != nil {
			t.Errorf("CheckStore(%q) = %v", good, err)
		}
	}
	config := filepath.Join(t.TempDir(), "paddock.yaml")
	if err := os.WriteFile(config, []byte("store: sqlite:///x.db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := server.LoadConfig(config, t.TempDir(), ""); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "store:") {
		t.Errorf("LoadConfig with store: sqlite:///x.db = %v, want ErrInvalidArgument naming store", err)
	}
}
