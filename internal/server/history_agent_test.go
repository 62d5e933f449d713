package server_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/testenv"
	"github.com/paddockhq/paddock/internal/wsbackup"
)

// startThroughAgent is a control plane on this host that reads and writes sandboxes'
// histories through their agents, as on a cluster, with backups to a real S3 store.
func startThroughAgent(t *testing.T) *servertest.Env {
	s3 := testenv.StartS3(t)
	return servertest.Start(t, func(cfg *server.Config) {
		backupConfig(t, cfg, s3.Endpoint, s3.Bucket, s3.AccessKey, s3.SecretKey)
		cfg.Runner.HistoryThroughAgent = true
		none := 0
		cfg.Backup.Retries = &none
	})
}

// With the histories reached only through the agents (the cluster's path): a fork at a
// checkpoint, a backup and its restore into a new sandbox and into the sandbox itself, and
// a history export imported into a new sandbox, each checked by its files.
func TestHistoryThroughAgent(t *testing.T) {
	e := startThroughAgent(t)
	alice := e.Register(t, "alice")
	var src api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "src"}), http.StatusCreated, &src)
	execIn(t, alice, src.ID, api.ExecRequest{Argv: []string{"sh", "-c", "mkdir -p d && echo one > d/a.txt && head -c 300000 /dev/urandom > big.bin"}})
	first := checkpointIn(t, alice, src.ID, "first")
	execIn(t, alice, src.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo two > d/a.txt"}})
	second := checkpointIn(t, alice, src.ID, "second")

	t.Run("fork", func(t *testing.T) {
		var res api.ForkResult
		servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+src.ID+"/fork", api.ForkRequest{At: first.ID, Name: "forked"}), http.StatusCreated, &res)
		if res.At != first.ID || res.Sandbox.ID == src.ID || res.Sandbox.Name != "forked" {
			t.Fatalf("fork %+v", res)
		}
		if res.SharedBlobs+res.ClonedBlobs != 0 {
			t.Errorf("the fork shared blobs on this host: %+v, want its history copied through the agents", res)
		}
		if got := catIn(t, alice, res.Sandbox.ID, "d/a.txt"); got != "one\n" {
			t.Errorf("the fork's d/a.txt: %q, want the first checkpoint's", got)
		}
		servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+res.Sandbox.ID+"/history/restore", api.RestoreRequest{Checkpoint: second.ID}), http.StatusOK, nil)
		if got := catIn(t, alice, res.Sandbox.ID, "d/a.txt"); got != "two\n" {
			t.Errorf("the fork restored to its source's second checkpoint: %q", got)
		}
		if e := servertest.ErrorOf(t, alice.DoToken("POST", "/api/v1/sandboxes/"+src.ID+"/fork", api.ForkRequest{At: "cp-nope"}), http.StatusNotFound); !strings.Contains(e.Message, "cp-nope") {
			t.Errorf("fork of a missing checkpoint: %+v", e)
		}
	})

	base := "/api/v1/sandboxes/" + src.ID + "/backups"
	var b1, b2 api.Backup
	t.Run("backup", func(t *testing.T) {
		servertest.Decode(t, alice.DoToken("POST", base, nil), http.StatusCreated, &b1)
		if b1.State != api.BackupDone || b1.UploadedBytes < 300000 {
			t.Fatalf("first backup %+v", b1)
		}
		execIn(t, alice, src.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo three > d/a.txt"}})
		servertest.Decode(t, alice.DoToken("POST", base, nil), http.StatusCreated, &b2)
		if b2.State != api.BackupDone || b2.UploadedBytes >= 100000 || b2.Checkpoint == b1.Checkpoint {
			t.Fatalf("second backup %+v: want only the changed blobs uploaded", b2)
		}
	})
	t.Run("restore into new", func(t *testing.T) {
		var res api.BackupRestoreResult
		servertest.Decode(t, alice.DoToken("POST", base+"/restore", api.BackupRestoreRequest{Backup: b1.ID, Into: "restored"}), http.StatusCreated, &res)
		if res.New == nil || res.Checkpoint != b1.Checkpoint {
			t.Fatalf("restore %+v", res)
		}
		if got := catIn(t, alice, res.New.ID, "d/a.txt"); got != "two\n" {
			t.Errorf("the restored sandbox's d/a.txt: %q, want the first backup's", got)
		}
	})
	t.Run("restore into same", func(t *testing.T) {
		execIn(t, alice, src.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo four > d/a.txt"}})
		var res api.BackupRestoreResult
		servertest.Decode(t, alice.DoToken("POST", base+"/restore", api.BackupRestoreRequest{Backup: b1.ID}), http.StatusOK, &res)
		if got := catIn(t, alice, src.ID, "d/a.txt"); got != "two\n" {
			t.Errorf("d/a.txt after restoring the first backup: %q", got)
		}
	})
	t.Run("export", func(t *testing.T) {
		resp := alice.DoToken("GET", "/api/v1/sandboxes/"+src.ID+"/history/export", nil)
		export, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || !bytes.HasPrefix(export, []byte("paddock-history-export-1\n")) {
			t.Fatalf("export: %d, %d bytes, %v", resp.StatusCode, len(export), err)
		}
		var into api.Sandbox
		servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "imported"}), http.StatusCreated, &into)
		servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+into.ID+"/history/import", bytes.NewReader(export)), http.StatusOK, nil)
		if got := catIn(t, alice, into.ID, "d/a.txt"); got != "two\n" {
			t.Errorf("the imported sandbox's d/a.txt: %q", got)
		}
	})
}

// A sandbox whose agent sends what its store does not hold (its store's files are the
// agent's to write) is refused, naming the blob, and nothing of it is trusted: a blob
// whose content does not hash to its name, one over the size bound.
func TestHistoryThroughAgentRefusesLies(t *testing.T) {
	e := startThroughAgent(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "liar"}), http.StatusCreated, &sb)
	const content = "the truth\n"
	execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "printf 'the truth\\n' > t.txt"}})
	checkpointIn(t, alice, sb.ID, "truth")
	sum := sha256.Sum256([]byte(content))
	hexSum := hex.EncodeToString(sum[:])
	objects := filepath.Join(e.Config.Runner.WorkspaceRoot, "alice", "history", sb.ID, "objects")
	blob := filepath.Join(objects, hexSum[:2], hexSum[2:])
	if err := os.Chmod(blob, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blob, []byte("the LIE!!\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := "/api/v1/sandboxes/" + sb.ID + "/backups"
	if e := servertest.ErrorOf(t, alice.DoToken("POST", base, nil), http.StatusConflict); !strings.Contains(e.Message, hexSum) || !strings.Contains(e.Message, "does not hash to it") {
		t.Errorf("a blob that is not its hash: %+v", e)
	}
	if err := os.WriteFile(blob, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}

	big := strings.Repeat("f", 64)
	huge := filepath.Join(objects, big[:2], big[2:])
	if err := os.MkdirAll(filepath.Dir(huge), 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(wsbackup.MaxBlob + 1); err != nil { // sparse: no disk taken
		t.Fatal(err)
	}
	f.Close()
	if e := servertest.ErrorOf(t, alice.DoToken("POST", base, nil), http.StatusConflict); !strings.Contains(e.Message, big) || !strings.Contains(e.Message, "over the bound") {
		t.Errorf("a blob over the bound: %+v", e)
	}
	var ls api.BackupList
	servertest.Decode(t, alice.DoToken("GET", base, nil), http.StatusOK, &ls)
	for _, b := range ls.Backups {
		if b.State == api.BackupDone {
			t.Errorf("a backup of the lying sandbox is in the store: %+v", b)
		}
	}
	if err := os.Remove(huge); err != nil {
		t.Fatal(err)
	}
	var ok api.Backup
	servertest.Decode(t, alice.DoToken("POST", base, nil), http.StatusCreated, &ok)
}
