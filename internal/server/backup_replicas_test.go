package server_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/store/pgtest"
	"github.com/paddockhq/paddock/internal/testenv"
)

// stallingS3 is a proxy in front of an S3 store that, once armed, holds the next PUT of a
// backup's manifest until released: a backup under way, its blobs read and uploaded.
type stallingS3 struct {
	*httptest.Server
	mu      sync.Mutex
	armed   bool
	stalled chan struct{} // closed when a manifest's PUT is held
	release chan struct{}
	once    sync.Once
}

func newStallingS3(t *testing.T, endpoint string) *stallingS3 {
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	s := &stallingS3{stalled: make(chan struct{}), release: make(chan struct{})}
	rp := httputil.NewSingleHostReverseProxy(u)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		hold := s.armed && r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/manifests/")
		if hold {
			s.armed = false
		}
		s.mu.Unlock()
		if hold {
			close(s.stalled)
			<-s.release
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		s.let()
		s.Close()
	})
	return s
}

// let releases the held PUT, if it was not yet.
func (s *stallingS3) let() { s.once.Do(func() { close(s.release) }) }

func (s *stallingS3) arm() { s.mu.Lock(); s.armed = true; s.mu.Unlock() }

// Two replicas on one PostgreSQL database and one bucket, under one backup key. A backup
// runs on replica r1, reusing a blob the bucket holds that no kept backup names (its
// manifest was dropped), and is held before its manifest goes up; meanwhile r2 runs a
// retention pass with a grace of 1ns, which would delete that blob. The pass takes the
// retention lease and waits for the backup (a pass on r1 then is refused, 409 naming
// r2, and a backup started on r1 waits for the pass, as ls says); once the backup is
// done the pass sweeps, the waiting backup goes on, and the first restores whole.
func TestRetentionAcrossReplicas(t *testing.T) {
	s3 := testenv.StartS3(t)
	dbURL := pgtest.URL(t)
	shared := t.TempDir()
	keyFile := newBackupKey(t)
	stall := newStallingS3(t, s3.Endpoint)
	replica := func(id, endpoint string) *servertest.Env {
		return servertest.Start(t, func(cfg *server.Config) {
			backupConfig(t, cfg, endpoint, s3.Bucket, s3.AccessKey, s3.SecretKey)
			cfg.Backup.KeyFile = keyFile
			cfg.Backup.KeepLast, cfg.Backup.PruneGrace = 1, "1ns"
			cfg.Store = dbURL
			cfg.Runner.DiskReserve = 2 << 30 // as startReplicas: several sandboxes' disks on a test machine's
			cfg.SecretsKeyFile = filepath.Join(shared, "secrets.key")
			cfg.Replica = server.ReplicaConfig{ID: id, Advertise: "127.0.0.1:1", ClusterKeyFile: filepath.Join(shared, "cluster.key")}
		})
	}
	r1 := replica("r1", stall.URL)
	r2 := replica("r2", s3.Endpoint)
	admin := adminOf(t, r2)
	alice := r1.Register(t, "alice")

	var sb, other api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "src"}), http.StatusCreated, &sb)
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "other"}), http.StatusCreated, &other)
	execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "head -c 100000 /dev/urandom > big.bin && sha256sum big.bin > sum"}})
	base := "/api/v1/sandboxes/" + sb.ID + "/backups"
	var first api.Backup
	servertest.Decode(t, alice.DoToken("POST", base, nil), http.StatusCreated, &first)
	// Its manifest goes (as a pass elsewhere would drop it): its blobs are named by none.
	manifest := backupPrefix(t, r1) + "sandboxes/" + sb.ID + "/manifests/" + first.ID
	if err := s3.Client.RemoveObject(context.Background(), s3.Bucket, manifest, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}

	stall.arm()
	type answer struct {
		status int
		body   string
	}
	call := func(c func() *http.Response) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			resp := c()
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			ch <- answer{resp.StatusCode, string(body)}
		}()
		return ch
	}
	backup := call(func() *http.Response { return alice.DoToken("POST", base, nil) })
	select {
	case <-stall.stalled:
	case a := <-backup:
		t.Fatalf("the backup on r1 ended before its manifest: %d %s", a.status, a.body)
	}
	prune := call(func() *http.Response {
		return bearer(t, r2, admin, "POST", "/api/v1/backups/prune", api.BackupPruneRequest{})
	})

	// Until the pass on r2 holds its lease (or, were it not to wait, has ended).
	st, err := store.Open(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var pruned *answer
	for held := false; !held && pruned == nil; {
		select {
		case a := <-prune:
			pruned = &a
		case <-time.After(50 * time.Millisecond):
			ls, err := st.BackupLeases(context.Background(), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range ls {
				held = held || (l.Name == store.RetentionLease && strings.HasPrefix(l.Holder, "r2/"))
			}
		}
	}
	var waiting <-chan answer
	if pruned == nil {
		e := servertest.ErrorOf(t, bearer(t, r1, admin, "POST", "/api/v1/backups/prune", api.BackupPruneRequest{}), http.StatusConflict)
		if !strings.Contains(e.Message, "under way on replica r2") {
			t.Errorf("a second pass, on r1, while r2's runs: %q", e.Message)
		}
		// A backup started on r1 now waits for the pass, and ls says so.
		waiting = call(func() *http.Response { return alice.DoToken("POST", "/api/v1/sandboxes/"+other.ID+"/backups", nil) })
		for seen := false; !seen; {
			select {
			case a := <-waiting:
				t.Fatalf("a backup started while r2's pass runs did not wait for it: %d %s", a.status, a.body)
			case <-time.After(50 * time.Millisecond):
			}
			var ls api.BackupList
			servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+other.ID+"/backups", nil), http.StatusOK, &ls)
			for _, b := range ls.Backups {
				seen = seen || (b.State == api.BackupRunning && strings.Contains(b.Error, "waiting for the retention pass under way on replica r2"))
			}
		}
	}
	stall.let()
	b := <-backup
	if b.status != http.StatusCreated {
		t.Fatalf("the backup on r1: %d %s", b.status, b.body)
	}
	if pruned == nil {
		a := <-prune
		pruned = &a
	}
	if pruned.status != http.StatusOK {
		t.Fatalf("the pass on r2: %d %s", pruned.status, pruned.body)
	}
	if waiting != nil {
		if a := <-waiting; a.status != http.StatusCreated {
			t.Fatalf("the backup that waited for the pass: %d %s", a.status, a.body)
		}
	}

	var res api.BackupRestoreResult
	servertest.Decode(t, alice.DoToken("POST", base+"/restore", api.BackupRestoreRequest{Into: "whole"}), http.StatusCreated, &res)
	if got := execIn(t, alice, res.New.ID, api.ExecRequest{Argv: []string{"sha256sum", "-c", "sum"}}); got.ExitCode != 0 {
		t.Fatalf("the restored big.bin: %s %s", got.Stdout, got.Stderr)
	}
}
