package wsbackup

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/paddockhq/paddock/internal/agent/history"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// An artifact's copy goes to the bucket sealed and comes back whole; a changed or
// swapped object is refused naming it, never its bytes; retention's sweep, even with no
// grace, leaves it; deleting it removes the object.
func TestArtifactCopy(t *testing.T) {
	tg := startS3(t)
	ctx := context.Background()
	key := newKey(t)
	const plain = "the build output of alice's site"
	art, other := []byte(plain), []byte("another artifact's bytes")
	sumArt, sumOther := sum(plain), sum(string(other))
	name, err := ArtifactName(tg, key, sumArt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := PutArtifact(ctx, tg, key, sumArt, other); !errors.Is(err, errdefs.ErrDataLoss) {
		t.Errorf("a copy whose bytes are not its hash's: %v, want refused", err)
	}
	for s, b := range map[string][]byte{sumArt: art, sumOther: other} {
		if _, err := PutArtifact(ctx, tg, key, s, b); err != nil {
			t.Fatal(err)
		}
	}
	raw := func(name string) []byte {
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
	sealed := raw(name)
	if bytes.Contains(sealed, art) {
		t.Fatal("the bucket holds the artifact's plaintext")
	}
	if got, err := GetArtifact(ctx, tg, key, sumArt); err != nil || !bytes.Equal(got, art) {
		t.Fatalf("the copy: %q %v", got, err)
	}
	otherName, _ := ArtifactName(tg, key, sumOther)
	flipped := bytes.Clone(sealed)
	flipped[len(flipped)-1] ^= 1
	for what, b := range map[string][]byte{"a changed byte": flipped, "another artifact's object": raw(otherName)} {
		put(name, b)
		got, err := GetArtifact(ctx, tg, key, sumArt)
		if !errors.Is(err, errdefs.ErrDataLoss) || !strings.Contains(err.Error(), name) || got != nil {
			t.Errorf("%s: %d bytes, %v; want refused naming %s", what, len(got), err, name)
		}
	}
	put(name, sealed)

	// A backup, then retention with no grace: the blobs no backup names go, the
	// artifacts' copies stay.
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
	if _, err := Run(ctx, tg, key, "sb-art1", hist); err != nil {
		t.Fatal(err)
	}
	k, _ := derive(key)
	orphan := k.blobName(tg, sum("orphan\n"))
	if _, err := k.put(ctx, tg, orphan, []byte("orphan\n")); err != nil {
		t.Fatal(err)
	}
	p, err := Prune(ctx, tg, key, Retention{KeepLast: 1}, time.Now().Add(time.Minute))
	if err != nil || p.Blobs != 1 {
		t.Errorf("retention: %+v %v, want the orphan blob alone swept", p, err)
	}
	if got, err := GetArtifact(ctx, tg, key, sumArt); err != nil || !bytes.Equal(got, art) {
		t.Errorf("the copy after retention: %q %v", got, err)
	}

	if err := DeleteArtifact(ctx, tg, key, sumArt); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.Client.StatObject(ctx, tg.Bucket, name, minio.StatObjectOptions{}); minio.ToErrorResponse(err).Code != "NoSuchKey" {
		t.Errorf("%s after the delete: %v, want gone", name, err)
	}
	if _, err := GetArtifact(ctx, tg, key, sumArt); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a deleted copy: %v, want not found", err)
	}
	if got, err := GetArtifact(ctx, tg, key, sumOther); err != nil || !bytes.Equal(got, other) {
		t.Errorf("the other copy after the delete: %q %v", got, err)
	}
}
