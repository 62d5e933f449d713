package store

import (
	"context"
	"fmt"
	"time"
)

// ArtifactRow is a user's packaged build as recorded; its bytes are stored apart, under
// their SHA-256.
type ArtifactRow struct {
	UserID     string
	SHA256     string
	SandboxID  string
	Runtime    string
	Dir        string
	Size       int64
	SBOMSHA256 string
	// Manifest is the artifact's manifest as JSON.
	Manifest  string
	CreatedAt time.Time
	// Replica is the replica whose data directory holds the bytes ("" without replicas).
	Replica string
	// Bucket is the state of the bytes' copy in the backup store (one of the Bucket*
	// states; "" without a store); BucketError is its last upload's error.
	Bucket      string
	BucketError string
}

// An artifact's copy in the backup store.
const (
	BucketPending  = "pending"  // to be uploaded
	BucketRetrying = "retrying" // the store failed; tried again with backoff
	BucketStored   = "stored"   // the archive and its SBOM are in the store
	BucketFailed   = "failed"   // given up on: BucketError says why
)

const artifactCols = `user_id, sha256, sandbox_id, runtime, dir, size, sbom_sha256, manifest, created_at, replica, bucket, bucket_error`

func scanArtifact(sc scanner) (ArtifactRow, error) {
	var r ArtifactRow
	var created int64
	err := sc.Scan(&r.UserID, &r.SHA256, &r.SandboxID, &r.Runtime, &r.Dir, &r.Size, &r.SBOMSHA256, &r.Manifest, &created, &r.Replica, &r.Bucket, &r.BucketError)
	r.CreatedAt = fromNanos(created)
	return r, err
}

// PutArtifact records an artifact; one the user has already (the same bytes) is brought
// up to date, so that it is again their newest, held by the replica that packaged it last.
func (s *Store) PutArtifact(ctx context.Context, r ArtifactRow) error {
	return s.Update(ctx, func(tx *Tx) error {
		_, err := tx.exec(ctx, `INSERT INTO artifacts (`+artifactCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (user_id, sha256) DO UPDATE SET sandbox_id = excluded.sandbox_id, runtime = excluded.runtime,
				dir = excluded.dir, sbom_sha256 = excluded.sbom_sha256, manifest = excluded.manifest, created_at = excluded.created_at,
				replica = excluded.replica, bucket = excluded.bucket, bucket_error = excluded.bucket_error`,
			r.UserID, r.SHA256, r.SandboxID, r.Runtime, r.Dir, r.Size, r.SBOMSHA256, r.Manifest, nanos(r.CreatedAt), r.Replica, r.Bucket, r.BucketError)
		if err != nil {
			return fmt.Errorf("record artifact %s: %w", r.SHA256, mapErr(err))
		}
		return nil
	})
}

// Artifact is one of the user's artifacts; ErrNotFound when the user has none with that
// digest (another user's is not theirs).
func (s *Store) Artifact(ctx context.Context, userID, sha string) (ArtifactRow, error) {
	r, err := scanArtifact(s.queryRow(ctx, `SELECT `+artifactCols+` FROM artifacts WHERE user_id = ? AND sha256 = ?`, userID, sha))
	if err != nil {
		return ArtifactRow{}, fmt.Errorf("artifact %s: %w", sha, mapErr(err))
	}
	return r, nil
}

// SetArtifactBucket records the state of the bucket copy of the archive sha: on every
// user's artifact of those bytes.
func (s *Store) SetArtifactBucket(ctx context.Context, sha, state, errText string) error {
	return s.Update(ctx, func(tx *Tx) error {
		if _, err := tx.exec(ctx, `UPDATE artifacts SET bucket = ?, bucket_error = ? WHERE sha256 = ?`, state, errText, sha); err != nil {
			return fmt.Errorf("artifact %s: record its bucket copy: %w", sha, mapErr(err))
		}
		return nil
	})
}

// DeleteArtifact deletes the user's artifact sha and returns it, with which of its blobs
// (the archive, the SBOM) no artifact of any user names any longer: those whose bytes
// may go. ErrNotFound when the user has no such artifact.
func (s *Store) DeleteArtifact(ctx context.Context, userID, sha string) (ArtifactRow, []string, error) {
	var r ArtifactRow
	var unused []string
	err := s.Update(ctx, func(tx *Tx) error {
		var err error
		r, err = scanArtifact(tx.queryRow(ctx, `DELETE FROM artifacts WHERE user_id = ? AND sha256 = ? RETURNING `+artifactCols, userID, sha))
		if err != nil {
			return fmt.Errorf("artifact %s: %w", sha, mapErr(err))
		}
		unused = unused[:0]
		for _, blob := range []string{r.SHA256, r.SBOMSHA256} {
			var n int
			if err := tx.queryRow(ctx, `SELECT count(*) FROM artifacts WHERE sha256 = ? OR sbom_sha256 = ?`, blob, blob).Scan(&n); err != nil {
				return fmt.Errorf("artifact %s: %w", sha, mapErr(err))
			}
			if n == 0 {
				unused = append(unused, blob)
			}
		}
		return nil
	})
	return r, unused, err
}

// ArtifactBlobUsers is how many artifacts, of any user, name blob sha as their archive or
// their SBOM.
func (s *Store) ArtifactBlobUsers(ctx context.Context, sha string) (int, error) {
	var n int
	if err := s.queryRow(ctx, `SELECT count(*) FROM artifacts WHERE sha256 = ? OR sbom_sha256 = ?`, sha, sha).Scan(&n); err != nil {
		return 0, fmt.Errorf("artifact blob %s: %w", sha, mapErr(err))
	}
	return n, nil
}

// ArtifactsToCopy are the artifacts whose bytes replica holds (a single server: "") and
// whose copy is not in the bucket: one row per archive.
func (s *Store) ArtifactsToCopy(ctx context.Context, replica string) ([]ArtifactRow, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+artifactCols+` FROM artifacts WHERE replica = ? AND bucket <> ? ORDER BY created_at, sha256`, replica, BucketStored)
	if err != nil {
		return nil, fmt.Errorf("artifacts to copy: %w", mapErr(err))
	}
	defer rows.Close()
	seen := map[string]bool{}
	var out []ArtifactRow
	for rows.Next() {
		r, err := scanArtifact(rows)
		if err != nil {
			return nil, fmt.Errorf("artifacts to copy: %w", mapErr(err))
		}
		if !seen[r.SHA256] {
			seen[r.SHA256] = true
			out = append(out, r)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("artifacts to copy: %w", mapErr(err))
	}
	return out, nil
}

// ListArtifacts is the user's artifacts, newest first.
func (s *Store) ListArtifacts(ctx context.Context, userID string) ([]ArtifactRow, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+artifactCols+` FROM artifacts WHERE user_id = ? ORDER BY created_at DESC, sha256`, userID)
	if err != nil {
		return nil, fmt.Errorf("list artifacts: %w", mapErr(err))
	}
	defer rows.Close()
	var out []ArtifactRow
	for rows.Next() {
		r, err := scanArtifact(rows)
		if err != nil {
			return nil, fmt.Errorf("list artifacts: %w", mapErr(err))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list artifacts: %w", mapErr(err))
	}
	return out, nil
}
