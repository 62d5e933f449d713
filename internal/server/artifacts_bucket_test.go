package server_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/testenv"
	"github.com/paddockhq/paddock/internal/wsbackup"
)

// An artifact packaged before the server had a backup store is copied there once it
// has one: the server that starts with a store uploads the copies its artifacts lack.
// While the store is down the copy is retried with backoff, its state retrying with the
// store's error; once the store is back, it is stored.
func TestArtifactCopyResumedAndRetried(t *testing.T) {
	s3 := testenv.StartS3(t)
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "p"}), http.StatusCreated, &sb)
	if r := result(providerStep(t, alice, sb.ID, "new", api.ProviderRequest{Runtime: "static", Name: "my-site", Dir: "site"})); r.Error != "" {
		t.Fatalf("new: %+v", r)
	}
	r := result(providerStep(t, alice, sb.ID, "package", api.ProviderRequest{Dir: "site"}))
	if r.Error != "" {
		t.Fatalf("package: %+v", r)
	}
	id := r.ArtifactID
	e.Stop(false)

	cfg := e.Config
	bucket := s3.Bucket
	front, up := switchedProxy(t, strings.TrimPrefix(s3.Endpoint, "http://"))
	backupConfig(t, &cfg, "http://"+front, bucket, s3.AccessKey, s3.SecretKey)
	retries := 100
	cfg.Backup.Retries, cfg.Backup.RetryBackoff = &retries, "100ms"
	e2 := servertest.StartWith(t, cfg)
	alice.Base = e2.URL
	state := func(want string) api.Artifact {
		t.Helper()
		var art api.Artifact
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
			art = api.Artifact{}
			servertest.Decode(t, alice.DoToken("GET", "/api/v1/artifacts/"+id, nil), http.StatusOK, &art)
			if art.Bucket == want || time.Now().After(deadline) {
				break
			}
		}
		if art.Bucket != want {
			t.Fatalf("the artifact's bucket copy: %q (%s), want %s", art.Bucket, art.BucketError, want)
		}
		return art
	}
	if art := state("retrying"); !strings.Contains(art.BucketError, "upload") {
		t.Errorf("retrying without the store's error: %+v", art)
	}
	up.Store(true)
	if art := state("stored"); strings.Join(art.Copies, ",") != "local,bucket" || art.BucketError != "" {
		t.Errorf("the stored copy: %+v", art)
	}
	key, err := os.ReadFile(filepath.Join(cfg.Runner.DataDir, "backup.key"))
	if err != nil {
		t.Fatal(err)
	}
	local, err := os.ReadFile(filepath.Join(cfg.Runner.DataDir, "artifacts", "sha256", id))
	if err != nil {
		t.Fatal(err)
	}
	tg := wsbackup.Target{Client: s3.Client, Bucket: bucket, Prefix: backupPrefix(t, e2)}
	name, _ := wsbackup.ArtifactName(tg, key, id)
	if _, err := s3.Client.StatObject(context.Background(), bucket, name, minio.StatObjectOptions{}); err != nil {
		t.Errorf("%s: %v", name, err)
	}
	if got, err := wsbackup.GetArtifact(context.Background(), tg, key, id); err != nil || !bytes.Equal(got, local) {
		t.Errorf("the copy in the bucket: %d bytes, %v; want the %d in the data dir", len(got), err, len(local))
	}
}

// switchedProxy forwards TCP connections on a loopback address to target while up is
// set, and closes them at once while it is not: a store that is down, then back.
func switchedProxy(t *testing.T, target string) (string, *atomic.Bool) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	up := new(atomic.Bool)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if !up.Load() {
				c.Close()
				continue
			}
			go func() {
				defer c.Close()
				b, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer b.Close()
				go func() { _, _ = io.Copy(b, c) }()
				_, _ = io.Copy(c, b)
			}()
		}
	}()
	return l.Addr().String(), up
}
