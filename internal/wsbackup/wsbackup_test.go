package wsbackup

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/paddockhq/paddock/internal/agent/history"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/testenv"
)

// startS3 is SeaweedFS on loopback with a fresh bucket (testenv.StartS3).
func startS3(t *testing.T) Target {
	t.Helper()
	s3 := testenv.StartS3(t)
	return Target{Client: s3.Client, Bucket: s3.Bucket, Prefix: "paddock/"}
}

func newKey(t *testing.T) []byte {
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A workspace's history goes to a real S3 server and back: the first backup uploads
// every blob, a one-file edit uploads one blob and the trees above it, the bucket holds
// no plaintext, and a restore into a new history directory (at the first backup's time,
// or the newest) gives back each checkpoint's files.
func TestBackupAndRestoreThroughS3(t *testing.T) {
	tg := startS3(t)
	ctx := context.Background()
	key := newKey(t)
	ws, hist := t.TempDir(), filepath.Join(t.TempDir(), "history")
	const secretText = "the plaintext of alice's notes, never in the bucket"
	for i := range 50 {
		write(t, ws, fmt.Sprintf("src/f%02d.txt", i), fmt.Sprintf("file %d\n", i))
	}
	write(t, ws, "notes.txt", secretText)
	h, err := history.Open(ws, hist)
	if err != nil {
		t.Fatal(err)
	}
	first, _, err := h.Checkpoint("manual", "first")
	if err != nil {
		t.Fatal(err)
	}
	b1, err := Run(ctx, tg, key, "sb-alice1", hist)
	if err != nil {
		t.Fatal(err)
	}
	if b1.Uploaded != b1.Blobs || b1.Blobs < 52 {
		t.Errorf("first backup: %+v, want every blob uploaded", b1)
	}
	write(t, ws, "src/f07.txt", "edited\n")
	second, _, err := h.Checkpoint("manual", "second")
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	b2, err := Run(ctx, tg, key, "sb-alice1", hist)
	if err != nil {
		t.Fatal(err)
	}
	// The new file's blob, src's tree and the root's tree.
	if b2.Uploaded != 3 || b2.Blobs != b1.Blobs+3 {
		t.Errorf("incremental backup after a one-file edit: %+v, want 3 blobs uploaded", b2)
	}
	for o := range tg.Client.ListObjects(ctx, tg.Bucket, minio.ListObjectsOptions{Recursive: true}) {
		obj, err := tg.Client.GetObject(ctx, tg.Bucket, o.Key, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		buf.ReadFrom(obj)
		obj.Close()
		if bytes.Contains(buf.Bytes(), []byte("alice's notes")) || bytes.Contains(buf.Bytes(), []byte("f07.txt")) {
			t.Fatalf("object %s holds plaintext", o.Key)
		}
	}
	list, err := List(ctx, tg, "sb-alice1")
	if err != nil || len(list) != 2 {
		t.Fatalf("List = %v, %v; want 2 backups", list, err)
	}

	for _, tc := range []struct {
		at     time.Time
		cp     history.Checkpoint
		want07 string
	}{{b1.At, first, "file 7\n"}, {time.Time{}, second, "edited\n"}} {
		into := filepath.Join(t.TempDir(), "history")
		got, err := Restore(ctx, tg, key, "sb-alice1", tc.at, into)
		if err != nil {
			t.Fatal(err)
		}
		if !tc.at.IsZero() && !got.Equal(b1.At) {
			t.Errorf("restore at %v picked %v", tc.at, got)
		}
		ws2 := t.TempDir()
		h2, err := history.Open(ws2, into)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h2.Restore(tc.cp.ID); err != nil {
			t.Fatalf("restore checkpoint %s from the restored history: %v", tc.cp.ID, err)
		}
		h2.Close()
		if b, _ := os.ReadFile(filepath.Join(ws2, "src/f07.txt")); string(b) != tc.want07 {
			t.Errorf("restored src/f07.txt = %q, want %q", b, tc.want07)
		}
		if b, _ := os.ReadFile(filepath.Join(ws2, "notes.txt")); string(b) != secretText {
			t.Errorf("restored notes.txt = %q", b)
		}
	}
	if _, err := Restore(ctx, tg, newKey(t), "sb-alice1", time.Time{}, filepath.Join(t.TempDir(), "h")); !errors.Is(err, errdefs.ErrDataLoss) {
		t.Errorf("restore under another key: %v, want ErrDataLoss", err)
	}
	// A directory that exists is refused and left as it was.
	taken := t.TempDir()
	write(t, taken, "keep.txt", "mine\n")
	if _, err := Restore(ctx, tg, key, "sb-alice1", time.Time{}, taken); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("restore into an existing directory: %v, want ErrAlreadyExists", err)
	}
	if b, err := os.ReadFile(filepath.Join(taken, "keep.txt")); err != nil || string(b) != "mine\n" {
		t.Errorf("the existing directory after a refused restore: keep.txt = %q, %v", b, err)
	}
}

// A changed, swapped or missing object is refused on restore, naming it, and nothing is
// left in the target directory.
func TestRestoreRefusesTamperedObjects(t *testing.T) {
	tg := startS3(t)
	ctx := context.Background()
	key := newKey(t)
	ws, hist := t.TempDir(), filepath.Join(t.TempDir(), "history")
	write(t, ws, "a.txt", "alpha\n")
	write(t, ws, "b.txt", "bravo\n")
	h, err := history.Open(ws, hist)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.Checkpoint("manual", "one"); err != nil {
		t.Fatal(err)
	}
	h.Close()
	if _, err := Run(ctx, tg, key, "sb-bob1", hist); err != nil {
		t.Fatal(err)
	}
	var blobs []string
	for o := range tg.Client.ListObjects(ctx, tg.Bucket, minio.ListObjectsOptions{Prefix: tg.Prefix + "blobs/", Recursive: true}) {
		blobs = append(blobs, o.Key)
	}
	if len(blobs) < 2 {
		t.Fatalf("blobs in the bucket: %v", blobs)
	}
	get := func(name string) []byte {
		o, err := tg.Client.GetObject(ctx, tg.Bucket, name, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(o); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	put := func(name string, b []byte) {
		if _, err := tg.Client.PutObject(ctx, tg.Bucket, name, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	restoreFails := func(what, naming string) {
		t.Helper()
		into := filepath.Join(t.TempDir(), "history")
		_, err := Restore(ctx, tg, key, "sb-bob1", time.Time{}, into)
		if !errors.Is(err, errdefs.ErrDataLoss) || !strings.Contains(err.Error(), naming) {
			t.Errorf("%s: restore = %v, want ErrDataLoss naming %s", what, err, naming)
		}
		if _, err := os.Stat(into); err == nil {
			t.Errorf("%s: the refused restore left %s", what, into)
		}
	}
	orig0, orig1 := get(blobs[0]), get(blobs[1])
	flipped := bytes.Clone(orig0)
	flipped[len(flipped)-1] ^= 1
	put(blobs[0], flipped)
	restoreFails("a changed byte", blobs[0])
	put(blobs[0], orig1) // another object's valid ciphertext under this name
	restoreFails("a swapped object", blobs[0])
	put(blobs[0], orig0)
	if err := tg.Client.RemoveObject(ctx, tg.Bucket, blobs[1], minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	restoreFails("a missing object", blobs[1])
	put(blobs[1], orig1)
	if _, err := Restore(ctx, tg, key, "sb-bob1", time.Time{}, filepath.Join(t.TempDir(), "history")); err != nil {
		t.Errorf("restore with the objects put back: %v", err)
	}
}

// FuzzOpen: any bytes as a fetched object are refused (they were not sealed under the
// key for this name), never a panic; a sealed object opens only under its own name.
func FuzzOpen(f *testing.F) {
	k, err := derive(bytes.Repeat([]byte{7}, KeySize))
	if err != nil {
		f.Fatal(err)
	}
	sealed, err := k.seal("blobs/x", []byte("content"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sealed, "blobs/x")
	f.Add([]byte{}, "blobs/y")
	f.Fuzz(func(t *testing.T, b []byte, name string) {
		plain, err := k.open(name, b)
		// Only the one object sealed above opens (a fuzzing worker seals its own, with
		// another nonce, so the bytes are not compared).
		if err == nil && (name != "blobs/x" || string(plain) != "content") {
			t.Fatalf("opened %x under %q: %q", b, name, plain)
		}
		if err != nil && !errors.Is(err, errdefs.ErrDataLoss) {
			t.Fatalf("refused with %v, want ErrDataLoss", err)
		}
	})
}

// A store that is down: the backup fails as unavailable, naming the bucket, and leaves
// nothing half-made that a restore would take for a backup.
func TestBackupStoreDown(t *testing.T) {
	tg := startS3(t)
	ws, hist := t.TempDir(), filepath.Join(t.TempDir(), "history")
	write(t, ws, "a.txt", "alpha\n")
	h, err := history.Open(ws, hist)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.Checkpoint("manual", "one"); err != nil {
		t.Fatal(err)
	}
	h.Close()
	down, err := minio.New("127.0.0.1:1", &minio.Options{Creds: credentials.NewStaticV4("x", "y", ""), Region: "us-east-1", MaxRetries: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := Run(ctx, Target{Client: down, Bucket: tg.Bucket, Prefix: tg.Prefix}, newKey(t), "sb-carol1", hist); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), tg.Bucket) {
		t.Errorf("backup to a store that is down: %v, want ErrUnavailable naming the bucket", err)
	}
	if list, err := List(ctx, tg, "sb-carol1"); err != nil || len(list) != 0 {
		t.Errorf("backups after the failure: %v, %v; want none", list, err)
	}
}

// FuzzParseID: a backup ID from a request is either refused as invalid or is the exact
// text of the time it parses to.
func FuzzParseID(f *testing.F) {
	f.Add("20261126T093726.634044416Z")
	f.Add("20261126T093726Z")
	f.Add("../../etc")
	f.Fuzz(func(t *testing.T, id string) {
		at, err := ParseID(id)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("%q: %v", id, err)
			}
			return
		}
		if at.Format(IDFormat) != id {
			t.Fatalf("%q parses to %v", id, at)
		}
	})
}
