package wsbackup

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/minio/minio-go/v7"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Artifacts. A second copy of each packaged build's bytes (its archive, its SBOM) is kept
// under artifacts/<HMAC-SHA-256(name key, its hash)>, sealed like every other object. The
// folder is apart from blobs/: retention's sweep lists blobs/ alone, so it never deletes
// an artifact's copy; the control plane deletes it with the artifact.

// ArtifactName is the object that holds the bytes whose SHA-256 is sum, under t.
func ArtifactName(t Target, key []byte, sum string) (string, error) {
	k, err := derive(key)
	if err != nil {
		return "", err
	}
	return k.artifactName(t, sum), nil
}

func (k keys) artifactName(t Target, sum string) string {
	m := hmac.New(sha256.New, k.nameKey)
	m.Write([]byte("artifact\x00" + sum))
	return t.Prefix + "artifacts/" + hex.EncodeToString(m.Sum(nil))
}

// PutArtifact seals blob and uploads it as the copy of the bytes whose SHA-256 is sum,
// which blob must hash to. It returns the object's size.
func PutArtifact(ctx context.Context, t Target, key []byte, sum string, blob []byte) (int64, error) {
	k, err := derive(key)
	if err != nil {
		return 0, err
	}
	if !validSum(sum) {
		return 0, fmt.Errorf("artifact copy: %q is not a SHA-256: %w", errdefs.Clip(sum, 80), errdefs.ErrInvalidArgument)
	}
	if got := sha256.Sum256(blob); hex.EncodeToString(got[:]) != sum {
		return 0, fmt.Errorf("artifact copy: the bytes given do not hash to %s: %w", sum, errdefs.ErrDataLoss)
	}
	return k.put(ctx, t, k.artifactName(t, sum), blob)
}

// GetArtifact fetches the copy of the bytes whose SHA-256 is sum. The object must open
// under key with its name and hash to sum: one that does not is refused, naming it
// (errdefs.ErrDataLoss), and its bytes are never returned. No copy is errdefs.ErrNotFound.
func GetArtifact(ctx context.Context, t Target, key []byte, sum string) ([]byte, error) {
	k, err := derive(key)
	if err != nil {
		return nil, err
	}
	if !validSum(sum) {
		return nil, fmt.Errorf("artifact copy: %q is not a SHA-256: %w", errdefs.Clip(sum, 80), errdefs.ErrInvalidArgument)
	}
	name := k.artifactName(t, sum)
	if _, err := t.Client.StatObject(ctx, t.Bucket, name, minio.StatObjectOptions{}); err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return nil, fmt.Errorf("artifact copy %s is not in the bucket: %w", name, errdefs.ErrNotFound)
		}
		return nil, fmt.Errorf("artifact copy %s: %w: %w", name, errdefs.ErrUnavailable, err)
	}
	blob, err := k.get(ctx, t, name)
	if err != nil {
		return nil, err
	}
	if got := sha256.Sum256(blob); hex.EncodeToString(got[:]) != sum {
		return nil, fmt.Errorf("backup object %s does not hash to %s: %w", name, sum, errdefs.ErrDataLoss)
	}
	return blob, nil
}

// DeleteArtifact deletes the copy of the bytes whose SHA-256 is sum; none is no error.
func DeleteArtifact(ctx context.Context, t Target, key []byte, sum string) error {
	k, err := derive(key)
	if err != nil {
		return err
	}
	if !validSum(sum) {
		return fmt.Errorf("artifact copy: %q is not a SHA-256: %w", errdefs.Clip(sum, 80), errdefs.ErrInvalidArgument)
	}
	name := k.artifactName(t, sum)
	if err := t.Client.RemoveObject(ctx, t.Bucket, name, minio.RemoveObjectOptions{}); err != nil {
		return fmt.Errorf("delete %s: %w: %w", name, errdefs.ErrUnavailable, err)
	}
	return nil
}
