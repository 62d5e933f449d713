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
}

const artifactCols = `user_id, sha256, sandbox_id, runtime, dir, size, sbom_sha256, manifest, created_at, replica`

func scanArtifact(sc scanner) (ArtifactRow, error) {
	var r ArtifactRow
	var created int64
	err := sc.Scan(&r.UserID, &r.SHA256, &r.SandboxID, &r.Runtime, &r.Dir, &r.Size, &r.SBOMSHA256, &r.Manifest, &created, &r.Replica)
	r.CreatedAt = fromNanos(created)
	return r, err
}

// PutArtifact records an artifact; one the user has already (the same bytes) is brought
// up to date, so that it is again their newest, held by the replica that packaged it last.
func (s *Store) PutArtifact(ctx context.Context, r ArtifactRow) error {
	return s.Update(ctx, func(tx *Tx) error {
		_, err := tx.exec(ctx, `INSERT INTO artifacts (`+artifactCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (user_id, sha256) DO UPDATE SET sandbox_id = excluded.sandbox_id, runtime = excluded.runtime,
				dir = excluded.dir, sbom_sha256 = excluded.sbom_sha256, manifest = excluded.manifest, created_at = excluded.created_at,
				replica = excluded.replica`,
			r.UserID, r.SHA256, r.SandboxID, r.Runtime, r.Dir, r.Size, r.SBOMSHA256, r.Manifest, nanos(r.CreatedAt), r.Replica)
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
