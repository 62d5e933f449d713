package server_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/store/pgtest"
	"github.com/paddockhq/paddock/internal/testenv"
	"github.com/paddockhq/paddock/internal/wsbackup"
)

// With a backup store, an artifact packaged on r2 is copied to the bucket, sealed; once
// r2 is killed, r1 serves its archive and SBOM (and releases it) from that copy, the
// exact bytes. A copy changed in the bucket, or another object put in its place, is
// refused naming its object, never sent. Deleting the artifact deletes its copies.
func TestReplicasArtifactsFromBucket(t *testing.T) {
	testenv.RequireRoot(t)
	s3 := testenv.StartS3(t)
	dbURL := pgtest.URL(t)
	dir := t.TempDir()
	key := make([]byte, wsbackup.KeySize)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"access": []byte(s3.AccessKey + "\n"), "secret": []byte(s3.SecretKey + "\n"), "backup.key": key}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rs := startReplicasWith(t, dbURL, 2, fmt.Sprintf(`backup:
  endpoint: %s
  bucket: %s
  prefix: paddock/
  region: us-east-1
  access_key_file: %s
  secret_key_file: %s
  key_file: %s
  retry_backoff: 100ms
`, s3.Endpoint, s3.Bucket, filepath.Join(dir, "access"), filepath.Join(dir, "secret"), filepath.Join(dir, "backup.key")))
	alice := (&servertest.Env{URL: rs[0].url}).Register(t, "alice") // her roles run on r1
	far := *alice
	far.Base = rs[1].url
	var roles api.Roles
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/roles", nil), http.StatusOK, &roles)
	var sb api.Sandbox
	servertest.Decode(t, far.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "p"}), http.StatusCreated, &sb)
	if r := result(providerStep(t, alice, sb.ID, "new", api.ProviderRequest{Runtime: "static", Name: "my-site", Dir: "site"})); r.Error != "" {
		t.Fatalf("new: %+v", r)
	}
	execOK(t, alice, sb.ID, "sh", "-c", `sed -i 's|<h1>|<h1 id="from-bucket">|' site/index.html`)
	evs := providerStep(t, alice, sb.ID, "package", api.ProviderRequest{Dir: "site"})
	r := result(evs)
	if r.Error != "" || len(r.ArtifactID) != 64 {
		t.Fatalf("package: result %+v; log:\n%s", r, logText(evs))
	}
	id := r.ArtifactID

	// The copy is uploaded after the step: its state comes to stored.
	var art api.Artifact
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		art = api.Artifact{}
		servertest.Decode(t, alice.DoToken("GET", "/api/v1/artifacts/"+id, nil), http.StatusOK, &art)
		if art.Bucket == "stored" || art.Bucket == "failed" || time.Now().After(deadline) {
			break
		}
	}
	if art.Bucket != "stored" || strings.Join(art.Copies, ",") != "local,bucket" || art.Replica != "r2" {
		t.Fatalf("the artifact's copies: %v, bucket %q (%s), replica %q; want local and bucket, stored, on r2", art.Copies, art.Bucket, art.BucketError, art.Replica)
	}
	ns, err := wsbackup.Namespace(key)
	if err != nil {
		t.Fatal(err)
	}
	target := wsbackup.Target{Client: s3.Client, Bucket: s3.Bucket, Prefix: "paddock/" + ns + "/"}
	name, _ := wsbackup.ArtifactName(target, key, id)
	sbomName, _ := wsbackup.ArtifactName(target, key, art.SBOM)
	ctx := context.Background()
	raw := func(name string) []byte {
		o, err := s3.Client.GetObject(ctx, s3.Bucket, name, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		b, err := io.ReadAll(o)
		if err != nil {
			t.Fatalf("%s in the bucket: %v", name, err)
		}
		return b
	}
	put := func(name string, b []byte) {
		if _, err := s3.Client.PutObject(ctx, s3.Bucket, name, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sealed := raw(name)

	download := func(c *servertest.Client, what string) (int, []byte) {
		t.Helper()
		resp := c.DoToken("GET", "/api/v1/artifacts/"+id+what, nil)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	code, want := download(&far, "/archive")
	if sum := sha256.Sum256(want); code != http.StatusOK || hex.EncodeToString(sum[:]) != id {
		t.Fatalf("the archive from r2: %d %.200s", code, want)
	}
	_, wantSBOM := download(&far, "/sbom")
	if bytes.Contains(sealed, want) {
		t.Fatal("the bucket holds the archive's plaintext")
	}

	// r2 dead, its data dir with it as far as r1 knows: r1 serves the bucket's copy.
	servertest.Decode(t, far.DoToken("DELETE", "/api/v1/sandboxes/"+sb.ID, nil), http.StatusNoContent, nil)
	rs[1].kill()
	if code, body := download(alice, "/archive"); code != http.StatusOK || !bytes.Equal(body, want) {
		t.Fatalf("the archive through r1 with r2 dead: %d, %d bytes (%.300s); want the %d bytes r2 served", code, len(body), body, len(want))
	}
	if code, body := download(alice, "/sbom"); code != http.StatusOK || !bytes.Equal(body, wantSBOM) {
		t.Errorf("the SBOM through r1 with r2 dead: %d %.300s", code, body)
	}
	var live api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/artifacts/"+id+"/release", nil), http.StatusOK, &live)
	if page := execOK(t, alice, roles.Live.ID, "cat", ".paddock/release/"+id[:12]+"/index.html"); !strings.Contains(page, `id="from-bucket"`) {
		t.Errorf("the page released from the bucket's copy: %q", page)
	}

	// A copy changed in the bucket, or the SBOM's copy put in its place: refused naming
	// the object, its bytes never sent.
	flipped := bytes.Clone(sealed)
	flipped[len(flipped)/2] ^= 1
	for _, c := range []struct {
		what string
		obj  []byte
	}{{"a changed byte", flipped}, {"another artifact's object", raw(sbomName)}} {
		put(name, c.obj)
		code, body := download(alice, "/archive")
		if code != http.StatusServiceUnavailable || !strings.Contains(string(body), name) || !strings.Contains(string(body), "refused") || bytes.Contains(body, want[:16]) {
			t.Errorf("%s: %d %.400s; want 503 naming %s", c.what, code, body, name)
		}
	}
	put(name, sealed)
	if code, body := download(alice, "/archive"); code != http.StatusOK || !bytes.Equal(body, want) {
		t.Errorf("the copy put back: %d, %d bytes", code, len(body))
	}

	// Deleted through r1, r2 dead: its copies go from the bucket.
	servertest.Decode(t, alice.DoToken("DELETE", "/api/v1/artifacts/"+id, nil), http.StatusNoContent, nil)
	for _, n := range []string{name, sbomName} {
		if _, err := s3.Client.StatObject(ctx, s3.Bucket, n, minio.StatObjectOptions{}); minio.ToErrorResponse(err).Code != "NoSuchKey" {
			t.Errorf("%s after the artifact's delete: %v, want gone", n, err)
		}
	}
	var list api.ArtifactList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/artifacts", nil), http.StatusOK, &list)
	if len(list.Artifacts) != 0 {
		t.Errorf("artifacts after the delete: %+v", list)
	}
	servertest.ErrorOf(t, alice.DoToken("GET", "/api/v1/artifacts/"+id+"/archive", nil), http.StatusNotFound)
}
