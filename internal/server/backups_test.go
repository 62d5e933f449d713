package server_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/testenv"
	"github.com/paddockhq/paddock/internal/wsbackup"
)

// backupConfig points cfg's backup section at endpoint, with credentials in files.
func backupConfig(t *testing.T, cfg *server.Config, endpoint, bucket, access, secret string) {
	t.Helper()
	dir := t.TempDir()
	af, sf := filepath.Join(dir, "access"), filepath.Join(dir, "secret")
	if err := os.WriteFile(af, []byte(access+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sf, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Backup = server.BackupConfig{Endpoint: endpoint, Bucket: bucket, Prefix: "paddock/", Region: "us-east-1",
		AccessKeyFile: af, SecretKeyFile: sf, RetryBackoff: "10ms"}
}

// backupPrefix is where e's backups are in the bucket: the prefix, then the namespace
// of e's backup key.
func backupPrefix(t *testing.T, e *servertest.Env) string {
	t.Helper()
	kf := e.Config.Backup.KeyFile
	if kf == "" {
		kf = filepath.Join(e.Config.Runner.DataDir, server.BackupKeyFileName)
	}
	key, err := os.ReadFile(kf)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := wsbackup.Namespace(key)
	if err != nil {
		t.Fatal(err)
	}
	return e.Config.Backup.Prefix + ns + "/"
}

// Backups against a real S3 store (SeaweedFS on loopback): now takes a checkpoint and
// uploads, incrementally; ls lists them with their checkpoint and bytes; restore at a
// backup writes a new sandbox of the same owner, or the sandbox itself, as it was then;
// another user's sandbox is not found; an unknown backup is a 404 naming it; a tampered
// manifest is refused naming it, nothing restored; the secret key is never logged.
func TestSandboxBackups(t *testing.T) {
	s3 := testenv.StartS3(t)
	e := servertest.Start(t, func(cfg *server.Config) { backupConfig(t, cfg, s3.Endpoint, s3.Bucket, s3.AccessKey, s3.SecretKey) })
	if fi, err := os.Stat(filepath.Join(e.Config.Runner.DataDir, server.BackupKeyFileName)); err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != 32 {
		t.Fatalf("the backup key file: %v %v", fi, err)
	}
	alice := e.Register(t, "alice")
	bob := e.Register(t, "bob")
	var src api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "src"}), http.StatusCreated, &src)
	base := "/api/v1/sandboxes/" + src.ID + "/backups"

	execIn(t, alice, src.ID, api.ExecRequest{Argv: []string{"sh", "-c", "mkdir -p d && echo one > d/a.txt && head -c 200000 /dev/urandom > big.bin"}})
	var first api.Backup
	servertest.Decode(t, alice.DoToken("POST", base, nil), http.StatusCreated, &first)
	if first.ID == "" || first.State != api.BackupDone || first.Checkpoint == "" || first.UploadedBytes < 200000 {
		t.Fatalf("first backup %+v", first)
	}
	execIn(t, alice, src.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo two > d/a.txt"}})
	var second api.Backup
	servertest.Decode(t, alice.DoToken("POST", base, nil), http.StatusCreated, &second)
	if second.ID == "" || second.ID == first.ID || second.Checkpoint == first.Checkpoint || second.UploadedBytes >= 100000 {
		t.Fatalf("second backup %+v (after %+v): want a new checkpoint and only the changed blobs uploaded", second, first)
	}
	var ls api.BackupList
	servertest.Decode(t, alice.DoToken("GET", base, nil), http.StatusOK, &ls)
	if len(ls.Backups) != 2 || ls.Backups[0].ID != first.ID || ls.Backups[1].Checkpoint != second.Checkpoint ||
		ls.Backups[0].UploadedBytes < 200000 || ls.Backups[0].UploadedBytes > first.UploadedBytes || ls.Backups[1].State != api.BackupDone || ls.StoreError != "" {
		t.Fatalf("ls %+v", ls)
	}
	servertest.ErrorOf(t, bob.DoToken("GET", base, nil), http.StatusNotFound)
	servertest.ErrorOf(t, bob.DoToken("POST", base, nil), http.StatusNotFound)
	servertest.ErrorOf(t, bob.DoToken("POST", base+"/restore", api.BackupRestoreRequest{Into: "stolen"}), http.StatusNotFound)

	// Into a new sandbox, at the first backup.
	var res api.BackupRestoreResult
	servertest.Decode(t, alice.DoToken("POST", base+"/restore", api.BackupRestoreRequest{Backup: first.ID, Into: "restored"}), http.StatusCreated, &res)
	if res.New == nil || res.New.Owner != alice.User.ID || res.New.Name != "restored" || res.Backup != first.ID || res.Checkpoint != first.Checkpoint {
		t.Fatalf("restore into new: %+v", res)
	}
	if got := catIn(t, alice, res.New.ID, "d/a.txt"); got != "one\n" {
		t.Errorf("the restored sandbox's d/a.txt: %q, want the first backup's", got)
	}
	// Into the same sandbox, at a time: the newest backup at or before it.
	execIn(t, alice, src.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo three > d/a.txt"}})
	res = api.BackupRestoreResult{}
	servertest.Decode(t, alice.DoToken("POST", base+"/restore", api.BackupRestoreRequest{At: first.Time.Add(time.Millisecond)}), http.StatusOK, &res)
	if res.New != nil || res.Sandbox != src.ID || res.Backup != first.ID {
		t.Fatalf("restore into same: %+v", res)
	}
	if got := catIn(t, alice, src.ID, "d/a.txt"); got != "one\n" {
		t.Errorf("d/a.txt after restoring the first backup: %q", got)
	}
	var evs api.EventList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?action=sandbox.backup_restore", nil), http.StatusOK, &evs)
	if len(evs.Events) != 2 {
		t.Errorf("restore events: %+v", evs.Events)
	}

	// Bad input.
	missing := "20000101T000000.000000000Z"
	if e := servertest.ErrorOf(t, alice.DoToken("POST", base+"/restore", api.BackupRestoreRequest{Backup: missing}), http.StatusNotFound); !strings.Contains(e.Message, missing) {
		t.Errorf("unknown backup: %q", e.Message)
	}
	if e := servertest.ErrorOf(t, alice.DoToken("POST", base+"/restore", api.BackupRestoreRequest{Backup: "yesterday"}), http.StatusBadRequest); !strings.Contains(e.Message, "yesterday") {
		t.Errorf("malformed backup ID: %q", e.Message)
	}
	servertest.ErrorOf(t, alice.DoToken("POST", base+"/restore", api.BackupRestoreRequest{At: first.Time.Add(-time.Hour)}), http.StatusNotFound)

	// A tampered manifest: refused by name, and ls says it is damaged.
	prefix := backupPrefix(t, e)
	manifest := prefix + "sandboxes/" + src.ID + "/manifests/" + second.ID
	if _, err := s3.Client.PutObject(context.Background(), s3.Bucket, manifest, strings.NewReader(strings.Repeat("x", 100)), 100, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if e := servertest.ErrorOf(t, alice.DoToken("POST", base+"/restore", api.BackupRestoreRequest{Backup: second.ID}), http.StatusConflict); !strings.Contains(e.Message, manifest) {
		t.Errorf("tampered manifest: %q", e.Message)
	}
	servertest.Decode(t, alice.DoToken("GET", base, nil), http.StatusOK, &ls)
	if len(ls.Backups) != 2 || ls.Backups[1].State != api.BackupDamaged || !strings.Contains(ls.Backups[1].Error, manifest) {
		t.Errorf("ls after tampering: %+v", ls)
	}
	if strings.Contains(e.Logs.String(), s3.SecretKey) {
		t.Error("the log holds the store's secret key")
	}

	// A file written just now (before the agent's own checkpoint settles) is in the
	// backup: the backup takes its checkpoint first.
	servertest.Decode(t, alice.DoToken("PUT", "/api/v1/sandboxes/"+src.ID+"/files/content?path=late.txt", strings.NewReader("late\n")), http.StatusOK, nil)
	var third api.Backup
	servertest.Decode(t, alice.DoToken("POST", base, nil), http.StatusCreated, &third)
	res = api.BackupRestoreResult{}
	servertest.Decode(t, alice.DoToken("POST", base+"/restore", api.BackupRestoreRequest{Backup: third.ID, Into: "late"}), http.StatusCreated, &res)
	if got := catIn(t, alice, res.New.ID, "late.txt"); got != "late\n" {
		t.Errorf("late.txt in the backup taken right after writing it: %q", got)
	}

	// Into the same sandbox while it is stopped: started for it, stopped again after.
	execIn(t, alice, src.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo four > d/a.txt"}})
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+src.ID+"/stop", nil), http.StatusOK, nil)
	res = api.BackupRestoreResult{}
	servertest.Decode(t, alice.DoToken("POST", base+"/restore", api.BackupRestoreRequest{Backup: first.ID}), http.StatusOK, &res)
	var after api.Sandbox
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+src.ID, nil), http.StatusOK, &after)
	if res.Checkpoint != first.Checkpoint || after.State != api.StateStopped {
		t.Errorf("restore into the stopped sandbox: %+v, then %s", res, after.State)
	}
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+src.ID+"/start", nil), http.StatusOK, nil)
	if got := catIn(t, alice, src.ID, "d/a.txt"); got != "one\n" {
		t.Errorf("d/a.txt after restoring the stopped sandbox: %q", got)
	}

	// Tampered blobs: the restore names one, and nothing changes.
	ctx := context.Background()
	for o := range s3.Client.ListObjects(ctx, s3.Bucket, minio.ListObjectsOptions{Prefix: prefix + "blobs/", Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if _, err := s3.Client.PutObject(ctx, s3.Bucket, o.Key, strings.NewReader(strings.Repeat("y", 64)), 64, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if e := servertest.ErrorOf(t, alice.DoToken("POST", base+"/restore", api.BackupRestoreRequest{Backup: first.ID, Into: "tampered"}), http.StatusConflict); !strings.Contains(e.Message, prefix+"blobs/") {
		t.Errorf("tampered blobs: %q", e.Message)
	}
	var all api.SandboxList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes", nil), http.StatusOK, &all)
	for _, x := range all.Sandboxes {
		if x.Name == "tampered" {
			t.Errorf("a sandbox was made from tampered blobs: %+v", x)
		}
	}
}

// A store that is down: the backup is tried again with backoff, then fails with 503
// naming its attempts; ls (the store's listing failing too) shows the failed attempt; an
// event and the metrics record it. Without a backup section, backups are a 409 naming it.
func TestSandboxBackupStoreDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String()
	l.Close()
	e := servertest.Start(t, func(cfg *server.Config) {
		backupConfig(t, cfg, down, "backups", "paddocktest", "paddocktest-secret-0123456789")
		two := 2
		cfg.Backup.Retries = &two
	})
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "src"}), http.StatusCreated, &sb)
	base := "/api/v1/sandboxes/" + sb.ID + "/backups"
	if e := servertest.ErrorOf(t, alice.DoToken("POST", base, nil), http.StatusServiceUnavailable); !strings.Contains(e.Message, "3 attempts") {
		t.Errorf("backup to a store that is down: %q", e.Message)
	}
	var ls api.BackupList
	servertest.Decode(t, alice.DoToken("GET", base, nil), http.StatusOK, &ls)
	if ls.StoreError == "" || len(ls.Backups) != 1 || ls.Backups[0].State != api.BackupFailed || ls.Backups[0].Attempts != 3 || ls.Backups[0].Error == "" {
		t.Errorf("ls with the store down: %+v", ls)
	}
	var evs api.EventList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?action=sandbox.backup_retry", nil), http.StatusOK, &evs)
	if len(evs.Events) != 2 {
		t.Errorf("retry events: %+v", evs.Events)
	}
	m := e.Metrics(t)
	for _, want := range []string{`paddock_backups_total{result="failed"} 1`, "paddock_backup_retries_total 2"} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(e.Logs.String(), "paddocktest-secret") {
		t.Error("the log holds the store's secret key")
	}
	for _, action := range []string{"sandbox.backup_retry", "sandbox.backup_failed"} {
		resp := alice.DoToken("GET", "/api/v1/events?action="+action, nil)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), sb.ID) || strings.Contains(string(body), "paddocktest-secret") {
			t.Errorf("%s events: %s", action, body)
		}
	}

	plain := servertest.Start(t)
	bob := plain.Register(t, "bob")
	servertest.Decode(t, bob.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "src"}), http.StatusCreated, &sb)
	if e := servertest.ErrorOf(t, bob.DoToken("GET", "/api/v1/sandboxes/"+sb.ID+"/backups", nil), http.StatusConflict); !strings.Contains(e.Message, "backup section") {
		t.Errorf("backups without a store: %q", e.Message)
	}
}

// A backup section that cannot work stops the start, naming the field; a backup key file
// of the wrong size is refused naming it.
func TestBackupConfigRefused(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ yaml, want string }{
		{"backup: {bucket: b}", "backup.endpoint"},
		{"backup: {endpoint: 'ftp://x', bucket: b, access_key_file: /a, secret_key_file: /s}", "backup.endpoint"},
		{"backup: {endpoint: 'http://u:p@x', bucket: b, access_key_file: /a, secret_key_file: /s}", "backup.endpoint"},
		{"backup: {endpoint: 'http://x', access_key_file: /a, secret_key_file: /s}", "backup.bucket"},
		{"backup: {endpoint: 'http://x', bucket: b}", "backup.access_key_file"},
		{"backup: {endpoint: 'http://x', bucket: b, prefix: p, access_key_file: /a, secret_key_file: /s}", "backup.prefix"},
		{"backup: {endpoint: 'http://x', bucket: b, access_key_file: /a, secret_key_file: /s, key_file: rel}", "backup.key_file"},
		{"backup: {endpoint: 'http://x', bucket: b, access_key_file: /a, secret_key_file: /s, every: soon}", "backup.every"},
		{"backup: {endpoint: 'http://x', bucket: b, access_key_file: /a, secret_key_file: /s, retries: -1}", "backup.retries"},
		{"backup: {endpoint: 'http://x', bucket: b, access_key_file: /a, secret_key_file: /s, keep_daily: 7}", "backup.keep_last"},
		{"backup: {endpoint: 'http://x', bucket: b, access_key_file: /a, secret_key_file: /s, keep_last: -1}", "backup.keep_last"},
		{"backup: {endpoint: 'http://x', bucket: b, access_key_file: /a, secret_key_file: /s, keep_last: 3, prune_grace: 0s}", "backup.prune_grace"},
	} {
		p := filepath.Join(dir, "paddock.yaml")
		if err := os.WriteFile(p, []byte(tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := server.LoadConfig(p, dir, ""); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.yaml, err, tc.want)
		}
	}
	key := filepath.Join(dir, "short.key")
	os.WriteFile(key, []byte("short"), 0o600)
	cfg, err := server.LoadConfig("", t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	backupConfig(t, &cfg, "http://127.0.0.1:1", "b", "a", "s")
	cfg.Backup.KeyFile = key
	if _, err := server.New(context.Background(), cfg, testenv.Logger(t), server.Options{}); err == nil || !strings.Contains(err.Error(), "backup.key_file") {
		t.Errorf("a short backup key: %v", err)
	}
}

// With backup.every, running sandboxes are backed up in the background, and paddock
// admin backup lists the backup key and the store's keys among the files kept apart.
func TestBackupSchedule(t *testing.T) {
	s3 := testenv.StartS3(t)
	e := servertest.Start(t, func(cfg *server.Config) {
		backupConfig(t, cfg, s3.Endpoint, s3.Bucket, s3.AccessKey, s3.SecretKey)
		cfg.Backup.Every = "200ms"
	})
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "src"}), http.StatusCreated, &sb)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		var ls api.BackupList
		servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID+"/backups", nil), http.StatusOK, &ls)
		if len(ls.Backups) > 0 && ls.Backups[0].State == api.BackupDone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scheduled backup: %+v", ls)
		}
	}

	m, err := server.Backup(context.Background(), e.Config, server.BackupOptions{Dir: filepath.Join(t.TempDir(), "b")})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range m.KeepApart {
		names[f.Name] = true
	}
	for _, n := range []string{server.BackupKeyFileName, "backup-access.key", "backup-secret.key"} {
		if !names[n] {
			t.Errorf("admin backup keeps apart %v: %s missing", names, n)
		}
	}
}

// A store that drops connections for a while and then answers: the backup is tried again
// until it goes through, and is done.
func TestSandboxBackupStoreRecovers(t *testing.T) {
	s3 := testenv.StartS3(t)
	target, err := url.Parse(s3.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	var dropped atomic.Int64
	rp := httputil.NewSingleHostReverseProxy(target)
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if dropped.Add(1) <= 25 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		rp.ServeHTTP(w, r)
	}))
	defer flaky.Close()
	e := servertest.Start(t, func(cfg *server.Config) {
		backupConfig(t, cfg, flaky.URL, s3.Bucket, s3.AccessKey, s3.SecretKey)
		many := 40
		cfg.Backup.Retries = &many
	})
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "src"}), http.StatusCreated, &sb)
	var b api.Backup
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/backups", nil), http.StatusCreated, &b)
	if b.State != api.BackupDone || b.Attempts < 2 || b.ID == "" {
		t.Errorf("backup through a store that came back: %+v", b)
	}
	var ls api.BackupList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID+"/backups", nil), http.StatusOK, &ls)
	if len(ls.Backups) != 1 || ls.Backups[0].ID != b.ID {
		t.Errorf("ls: %+v", ls)
	}
	if !strings.Contains(e.Metrics(t), `paddock_backups_total{result="done"} 1`) {
		t.Error("metrics lack the backup done")
	}
}

// One backup of a sandbox at a time: a second asked for while the first waits on the
// store is a 409 saying so; the first then completes.
func TestSandboxBackupOneAtATime(t *testing.T) {
	s3 := testenv.StartS3(t)
	target, err := url.Parse(s3.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	var held atomic.Bool
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if held.Load() {
			select {
			case arrived <- struct{}{}:
			default:
			}
			<-release
		}
		rp.ServeHTTP(w, r)
	}))
	defer gate.Close()
	e := servertest.Start(t, func(cfg *server.Config) { backupConfig(t, cfg, gate.URL, s3.Bucket, s3.AccessKey, s3.SecretKey) })
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "src"}), http.StatusCreated, &sb)
	base := "/api/v1/sandboxes/" + sb.ID + "/backups"
	held.Store(true)
	first := make(chan *http.Response, 1)
	go func() { first <- alice.DoToken("POST", base, nil) }()
	<-arrived
	if e := servertest.ErrorOf(t, alice.DoToken("POST", base, nil), http.StatusConflict); !strings.Contains(e.Message, "under way") {
		t.Errorf("a second backup at once: %q", e.Message)
	}
	held.Store(false)
	close(release)
	var b api.Backup
	servertest.Decode(t, <-first, http.StatusCreated, &b)
	if b.State != api.BackupDone {
		t.Errorf("the first backup: %+v", b)
	}
}

// A backup keeps the sandbox's record: a restore into a new sandbox has the limits, the
// environment and the own policy the sandbox had when it was backed up, not those it was
// given since.
func TestBackupRestoreCarriesRecord(t *testing.T) {
	s3 := testenv.StartS3(t)
	e := servertest.Start(t, func(cfg *server.Config) { backupConfig(t, cfg, s3.Endpoint, s3.Bucket, s3.AccessKey, s3.SecretKey) })
	alice := e.Register(t, "alice")
	var src api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "src", Env: []string{"COLOR=blue"}}), http.StatusCreated, &src)
	then := testPolicy + "resources: {memory: 300M, pids: 128}\n"
	servertest.Decode(t, putPolicy(t, alice, src.ID, "application/yaml", then), http.StatusOK, nil)
	var b api.Backup
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+src.ID+"/backups", nil), http.StatusCreated, &b)
	since := testPolicy + "resources: {memory: 200M, pids: 64}\n"
	servertest.Decode(t, putPolicy(t, alice, src.ID, "application/yaml", since), http.StatusOK, nil)

	var res api.BackupRestoreResult
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+src.ID+"/backups/restore", api.BackupRestoreRequest{Backup: b.ID, Into: "again"}), http.StatusCreated, &res)
	if res.New == nil {
		t.Fatalf("restore into new: %+v", res)
	}
	var got api.Sandbox
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+res.New.ID, nil), http.StatusOK, &got)
	if got.Name != "again" || got.Tier != src.Tier || got.Limits.MemoryBytes != 300<<20 || got.Limits.Pids != 128 || len(got.Env) != 1 || got.Env[0] != "COLOR=blue" {
		t.Errorf("the restored sandbox %+v, want named again, tier %s, 300M and 128 pids, COLOR=blue", got, src.Tier)
	}
	var pol api.SandboxPolicy
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+res.New.ID+"/policy", nil), http.StatusOK, &pol)
	if pol.Source != api.PolicySandbox || pol.Policy != then {
		t.Errorf("the restored sandbox's policy: %s %q, want its own, as backed up", pol.Source, pol.Policy)
	}
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+src.ID+"/policy", nil), http.StatusOK, &pol)
	if pol.Policy != since || pol.Limits.MemoryBytes != 200<<20 {
		t.Errorf("the source's policy changed: %q %+v", pol.Policy, pol.Limits)
	}
}
