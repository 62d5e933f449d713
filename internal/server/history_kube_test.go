//go:build kube

package server_test

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/sandbox/kube/kubetest"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/testenv"
)

// TestHistoryOnCluster: a cluster sandbox's history, which lives on its volume, is read
// and written through its agent: a fork at a checkpoint, a backup to a real S3 store and
// its restore into a new sandbox, and a history export imported into another sandbox,
// each checked by its files.
func TestHistoryOnCluster(t *testing.T) {
	s3 := testenv.StartS3(t)
	e := servertest.Start(t, func(c *server.Config) {
		c.Runner = kubetest.Config(t, c.Runner)
		backupConfig(t, c, s3.Endpoint, s3.Bucket, s3.AccessKey, s3.SecretKey)
	})
	alice := e.Register(t, "alice")
	small := api.Limits{Memory: "256M"}
	var src api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "src", Limits: small}), http.StatusCreated, &src)
	execIn(t, alice, src.ID, api.ExecRequest{Argv: []string{"sh", "-c", "mkdir -p d && echo one > d/a.txt && head -c 100000 /dev/urandom > big.bin"}})
	first := checkpointIn(t, alice, src.ID, "first")
	execIn(t, alice, src.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo two > d/a.txt"}})
	checkpointIn(t, alice, src.ID, "second")

	var fork api.ForkResult
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+src.ID+"/fork", api.ForkRequest{At: first.ID, Name: "forked"}), http.StatusCreated, &fork)
	if fork.At != first.ID || fork.Sandbox.Node == "" {
		t.Fatalf("fork %+v", fork)
	}
	if got := catIn(t, alice, fork.Sandbox.ID, "d/a.txt"); got != "one\n" {
		t.Errorf("the fork's d/a.txt: %q, want the first checkpoint's", got)
	}

	base := "/api/v1/sandboxes/" + src.ID + "/backups"
	var b api.Backup
	servertest.Decode(t, alice.DoToken("POST", base, nil), http.StatusCreated, &b)
	if b.State != api.BackupDone || b.UploadedBytes < 100000 {
		t.Fatalf("backup %+v", b)
	}
	execIn(t, alice, src.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo three > d/a.txt"}})
	var res api.BackupRestoreResult
	servertest.Decode(t, alice.DoToken("POST", base+"/restore", api.BackupRestoreRequest{Backup: b.ID, Into: "restored"}), http.StatusCreated, &res)
	if res.New == nil || res.Checkpoint != b.Checkpoint {
		t.Fatalf("restore %+v", res)
	}
	if got := catIn(t, alice, res.New.ID, "d/a.txt"); got != "two\n" {
		t.Errorf("the restored sandbox's d/a.txt: %q, want the backup's", got)
	}

	resp := alice.DoToken("GET", "/api/v1/sandboxes/"+src.ID+"/history/export", nil)
	export, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("export: %d, %v", resp.StatusCode, err)
	}
	servertest.Decode(t, alice.DoToken("DELETE", "/api/v1/sandboxes/"+fork.Sandbox.ID, nil), http.StatusNoContent, nil)
	var into api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "imported", Limits: small}), http.StatusCreated, &into)
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+into.ID+"/history/import", bytes.NewReader(export)), http.StatusOK, nil)
	if got := catIn(t, alice, into.ID, "d/a.txt"); got != "three\n" {
		t.Errorf("the imported sandbox's d/a.txt: %q, want the export's", got)
	}
}
