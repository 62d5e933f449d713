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

// TestArtifactBucketAndDelete: the bucket copy's state is the same on every user's
// artifact of those bytes; the artifacts a replica holds without a stored copy are listed
// once per archive; a delete names the blobs no artifact names any longer.
func TestArtifactBucketAndDelete(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		s := db.open(t)
		alice, bob := mustUser(t, s, "alice"), mustUser(t, s, "bob")
		a, b, sbom := strings.Repeat("a", 64), strings.Repeat("b", 64), strings.Repeat("c", 64)
		for _, r := range []ArtifactRow{
			{UserID: alice.ID, SHA256: a, SBOMSHA256: sbom, Replica: "r1", Bucket: BucketPending, Manifest: "{}", CreatedAt: t0},
			{UserID: bob.ID, SHA256: a, SBOMSHA256: sbom, Replica: "r1", Bucket: BucketPending, Manifest: "{}", CreatedAt: t0},
			{UserID: alice.ID, SHA256: b, SBOMSHA256: sbom, Replica: "r1", Bucket: BucketPending, Manifest: "{}", CreatedAt: t0.Add(time.Minute)},
		} {
			if err := s.PutArtifact(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		todo, err := s.ArtifactsToCopy(ctx, "r1")
		if err != nil || len(todo) != 2 || todo[0].SHA256 != a || todo[1].SHA256 != b {
			t.Fatalf("r1's artifacts to copy: %+v %v, want a then b, once each", todo, err)
		}
		if err := s.SetArtifactBucket(ctx, a, BucketStored, ""); err != nil {
			t.Fatal(err)
		}
		if err := s.SetArtifactBucket(ctx, b, BucketRetrying, "the store is down"); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Artifact(ctx, bob.ID, a); got.Bucket != BucketStored {
			t.Errorf("bob's artifact of the stored bytes: %q", got.Bucket)
		}
		if got, _ := s.Artifact(ctx, alice.ID, b); got.Bucket != BucketRetrying || got.BucketError != "the store is down" {
			t.Errorf("alice's artifact retrying: %+v", got)
		}
		if todo, _ := s.ArtifactsToCopy(ctx, "r1"); len(todo) != 1 || todo[0].SHA256 != b {
			t.Errorf("r1's artifacts to copy once a is stored: %+v", todo)
		}
		if err := s.SetArtifactBucket(ctx, b, BucketStored, ""); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Artifact(ctx, alice.ID, b); got.Bucket != BucketStored || got.BucketError != "" {
			t.Errorf("alice's artifact stored after retrying: %+v", got)
		}
		if todo, _ := s.ArtifactsToCopy(ctx, "r2"); len(todo) != 0 {
			t.Errorf("r2's artifacts to copy: %+v", todo)
		}
		// Deleting alice's a leaves bob's: nothing unused. Deleting b leaves the SBOM
		// bob's a names. Deleting bob's a frees both.
		for _, c := range []struct {
			user, sha string
			unused    []string
		}{{alice.ID, a, nil}, {alice.ID, b, []string{b}}, {bob.ID, a, []string{a, sbom}}} {
			got, unused, err := s.DeleteArtifact(ctx, c.user, c.sha)
			if err != nil || got.SHA256 != c.sha || strings.Join(unused, ",") != strings.Join(c.unused, ",") {
				t.Errorf("delete %s of %s: %+v unused %v, %v; want unused %v", c.sha[:1], c.user, got, unused, err, c.unused)
			}
		}
		if _, _, err := s.DeleteArtifact(ctx, bob.ID, a); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("a second delete: %v, want not found", err)
		}
	})
}
