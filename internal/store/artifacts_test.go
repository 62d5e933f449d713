package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// TestArtifacts: an artifact is its user's alone, listed newest first, and the same bytes
// packaged again are one artifact, newest again.
func TestArtifacts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		s := db.open(t)
		alice, bob := mustUser(t, s, "alice"), mustUser(t, s, "bob")
		a, b := strings.Repeat("a", 64), strings.Repeat("b", 64)
		row := func(sha string, at time.Time) ArtifactRow {
			return ArtifactRow{UserID: alice.ID, SHA256: sha, SandboxID: "sb-1", Runtime: "node", Dir: "site", Size: 3, SBOMSHA256: strings.Repeat("c", 64), Manifest: "{}", CreatedAt: at}
		}
		again := row(a, t0.Add(2*time.Minute))
		again.Replica = "r2"
		for _, r := range []ArtifactRow{row(a, t0), row(b, t0.Add(time.Minute)), again} {
			if err := s.PutArtifact(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		list, err := s.ListArtifacts(ctx, alice.ID)
		if err != nil || len(list) != 2 || list[0].SHA256 != a || list[1].SHA256 != b {
			t.Fatalf("alice's artifacts: %+v, %v", list, err)
		}
		if got, err := s.Artifact(ctx, alice.ID, b); err != nil || got.Runtime != "node" || got.Dir != "site" {
			t.Errorf("Artifact: %+v, %v", got, err)
		}
		if _, err := s.Artifact(ctx, bob.ID, a); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("bob reads alice's artifact: %v", err)
		}
		if got, err := s.Artifact(ctx, alice.ID, a); err != nil || got.Replica != "r2" {
			t.Errorf("the artifact packaged again on r2: held by %q, %v; want r2", got.Replica, err)
		}
		if list, _ := s.ListArtifacts(ctx, bob.ID); len(list) != 0 {
			t.Errorf("bob lists %+v", list)
		}
	})
}
