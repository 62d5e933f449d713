package wsbackup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/paddockhq/paddock/internal/agent/history"
	"github.com/paddockhq/paddock/internal/errdefs"
)

func TestRetentionKeeps(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	at := func(daysAgo, hour int) time.Time {
		return time.Date(2026, 11, 26-daysAgo, hour, 0, 0, 0, time.UTC)
	}
	times := []time.Time{at(0, 9), at(0, 8), at(1, 20), at(1, 10), at(2, 23), at(5, 1)}
	for _, tc := range []struct {
		r    Retention
		want []time.Time
	}{
		{Retention{KeepLast: 1}, []time.Time{at(0, 9)}},
		{Retention{KeepLast: 3}, []time.Time{at(0, 9), at(0, 8), at(1, 20)}},
		{Retention{KeepLast: 1, KeepDaily: 3}, []time.Time{at(0, 9), at(1, 20), at(2, 23)}},
		{Retention{KeepLast: 2, KeepDaily: 2}, []time.Time{at(0, 9), at(0, 8), at(1, 20)}},
		{Retention{KeepLast: 1, KeepDaily: 30}, []time.Time{at(0, 9), at(1, 20), at(2, 23), at(5, 1)}},
		{Retention{KeepLast: 10}, times},
	} {
		got := tc.r.kept(times, now)
		if len(got) != len(tc.want) {
			t.Errorf("%+v kept %v, want %v", tc.r, got, tc.want)
			continue
		}
		for _, w := range tc.want {
			if !got[w] {
				t.Errorf("%+v kept %v, want %v", tc.r, got, tc.want)
			}
		}
	}
}

// sum is the SHA-256 of content, as the history names its blob.
func sum(content string) string {
	s := sha256.Sum256([]byte(content))
	return hex.EncodeToString(s[:])
}

// Several backups on several days, then a retention pass: the kept backups restore, the
// dropped ones are gone with the blobs only they named, blobs another sandbox's backup
// names stay, and a blob a backup under way uploaded (no manifest names it yet) is
// spared by the grace.
func TestPruneAgainstS3(t *testing.T) {
	tg := startS3(t)
	ctx := context.Background()
	key := newKey(t)
	k, _ := derive(key)
	exists := func(name string) bool {
		_, err := tg.Client.StatObject(ctx, tg.Bucket, name, minio.StatObjectOptions{})
		return err == nil
	}
	// Backups are named by the time the clock gives; the retention's days count back
	// from cut, a second boundary after every backup's upload.
	cut := time.Now().UTC().Truncate(time.Second).Add(2 * time.Second)
	today := cut.Truncate(24 * time.Hour)
	named := []time.Time{ // oldest first
		today.Add(-49 * time.Hour), // day -3: dropped
		today.Add(-26 * time.Hour), // day -2, older: dropped
		today.Add(-25 * time.Hour), // day -2, newest: kept as the day's
		today.Add(-2 * time.Hour),  // day -1, older: dropped
		today.Add(-1 * time.Hour),  // day -1, newest: kept as the newest
	}
	defer func() { clock = time.Now }()
	backup := func(sandbox string, at time.Time, unique string) {
		t.Helper()
		ws, hist := t.TempDir(), filepath.Join(t.TempDir(), "history")
		for i := range 5 {
			write(t, ws, fmt.Sprintf("common/f%d.txt", i), fmt.Sprintf("common %d\n", i))
		}
		write(t, ws, "unique.txt", unique)
		h, err := history.Open(ws, hist)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := h.Checkpoint("manual", unique); err != nil {
			t.Fatal(err)
		}
		h.Close()
		clock = func() time.Time { return at }
		if _, err := Run(ctx, tg, key, sandbox, hist); err != nil {
			t.Fatal(err)
		}
	}
	for i, at := range named {
		backup("sb-a", at, fmt.Sprintf("unique to backup %d\n", i))
	}
	backup("sb-b", today.Add(-100*time.Hour), "unique to sb-b\n") // its only backup: kept
	for time.Now().Before(cut) {
		time.Sleep(time.Until(cut) + 10*time.Millisecond)
	}
	// A backup under way: its blob is uploaded, its manifest not yet.
	inflight := k.blobName(tg, sum("in flight\n"))
	if _, err := k.put(ctx, tg, inflight, []byte("in flight\n")); err != nil {
		t.Fatal(err)
	}

	// A dry run deletes nothing and says what the pass would drop; a pass narrowed to
	// sb-b (one backup, kept) drops none of sb-a's.
	dry, err := PruneWith(ctx, tg, key, Retention{KeepLast: 1, KeepDaily: 3}, cut, PruneOptions{DryRun: true})
	if err != nil || dry.Manifests != 3 || dry.Kept != 3 || dry.Blobs == 0 || len(dry.Dropped) != 3 ||
		dry.Dropped[0] != (Ref{Sandbox: "sb-a", ID: named[0].Format(IDFormat)}) || dry.Dropped[2] != (Ref{Sandbox: "sb-a", ID: named[3].Format(IDFormat)}) {
		t.Errorf("dry run: %+v %v, want sb-a's backups 0, 1 and 3 dropped", dry, err)
	}
	only, err := PruneWith(ctx, tg, key, Retention{KeepLast: 1, KeepDaily: 3, Grace: time.Hour}, cut, PruneOptions{Sandbox: "sb-b"})
	if err != nil || only.Manifests != 0 || only.Kept != 6 {
		t.Errorf("pass narrowed to sb-b: %+v %v, want nothing dropped", only, err)
	}
	if l, err := List(ctx, tg, "sb-a"); err != nil || len(l) != len(named) || !exists(k.blobName(tg, sum("unique to backup 0\n"))) {
		t.Errorf("after a dry run and a pass narrowed to sb-b, sb-a has %d backups (%v), want %d and their blobs", len(l), err, len(named))
	}

	p, err := Prune(ctx, tg, key, Retention{KeepLast: 1, KeepDaily: 3, Grace: 0}, cut)
	if err != nil {
		t.Fatal(err)
	}
	if p.Manifests != 3 || p.Kept != 3 || p.Blobs == 0 {
		t.Errorf("pruned %+v, want 3 backups dropped, 3 kept, blobs deleted", p)
	}
	left, err := List(ctx, tg, "sb-a")
	if err != nil || len(left) != 2 || !left[0].Equal(named[2]) || !left[1].Equal(named[4]) {
		t.Errorf("sb-a's backups after the pass: %v (%v), want %v and %v", left, err, named[2], named[4])
	}
	for i := range named {
		name := k.blobName(tg, sum(fmt.Sprintf("unique to backup %d\n", i)))
		if kept := i == 2 || i == 4; exists(name) != kept {
			t.Errorf("backup %d's unique blob: in the bucket %v, want %v", i, exists(name), kept)
		}
	}
	for _, c := range []string{"common 0\n", "unique to sb-b\n"} {
		if !exists(k.blobName(tg, sum(c))) {
			t.Errorf("blob of %q, named by a kept backup, was deleted", c)
		}
	}
	if !exists(inflight) {
		t.Error("the blob of a backup under way was deleted: the grace should spare it")
	}
	for _, i := range []int{2, 4} {
		into := filepath.Join(t.TempDir(), "history")
		if _, err := Restore(ctx, tg, key, "sb-a", named[i], into); err != nil {
			t.Fatalf("restore kept backup %d: %v", i, err)
		}
		ws := t.TempDir()
		h, err := history.Open(ws, into)
		if err != nil {
			t.Fatal(err)
		}
		cps := h.List()
		if len(cps) == 0 {
			t.Fatalf("restored history of backup %d has no checkpoint", i)
		}
		if _, err := h.Restore(cps[0].ID); err != nil {
			t.Fatal(err)
		}
		h.Close()
		if b, _ := os.ReadFile(filepath.Join(ws, "unique.txt")); !bytes.Equal(b, []byte(fmt.Sprintf("unique to backup %d\n", i))) {
			t.Errorf("restored backup %d: unique.txt = %q", i, b)
		}
	}
	if _, err := Restore(ctx, tg, key, "sb-a", named[1], filepath.Join(t.TempDir(), "h")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("restore at a dropped backup's time (none kept before it): %v, want not found", err)
	}
	// A second pass once the grace has passed takes the unnamed blob.
	if p, err := Prune(ctx, tg, key, Retention{KeepLast: 1, KeepDaily: 3}, time.Now().Add(time.Minute)); err != nil || p.Blobs != 1 || exists(inflight) {
		t.Errorf("second pass: %+v %v, want the abandoned blob deleted", p, err)
	}
}

// An incremental backup after a one-file edit uploads a few KB whatever the workspace's
// file count: the manifest names lists of the blobs' hashes, and only the lists that hold
// a changed hash are new.
func TestIncrementalBackupStaysSmall(t *testing.T) {
	tg := startS3(t)
	ctx := context.Background()
	key := newKey(t)
	ws, hist := t.TempDir(), filepath.Join(t.TempDir(), "history")
	for i := range 3000 {
		write(t, ws, fmt.Sprintf("d%02d/f%04d.txt", i%30, i), fmt.Sprintf("file %d\n", i))
	}
	h, err := history.Open(ws, hist)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, _, err := h.Checkpoint("manual", "first"); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(ctx, tg, key, "sb-many", hist); err != nil {
		t.Fatal(err)
	}
	write(t, ws, "d07/f0007.txt", "edited\n")
	if _, _, err := h.Checkpoint("manual", "second"); err != nil {
		t.Fatal(err)
	}
	b, err := Run(ctx, tg, key, "sb-many", hist)
	if err != nil {
		t.Fatal(err)
	}
	if b.Uploaded != 3 || b.UploadedBytes > 50_000 {
		t.Errorf("incremental backup of a one-file edit among %d blobs: %d blobs, %d bytes uploaded; want 3 blobs and at most 50 KB", b.Blobs, b.Uploaded, b.UploadedBytes)
	}
	into := filepath.Join(t.TempDir(), "history")
	if _, err := Restore(ctx, tg, key, "sb-many", time.Time{}, into); err != nil {
		t.Fatal(err)
	}
	ws2 := t.TempDir()
	h2, err := history.Open(ws2, into)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	cps := h2.List()
	if _, err := h2.Restore(cps[0].ID); err != nil { // newest first
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(ws2, "d07/f0007.txt")); string(got) != "edited\n" {
		t.Errorf("restored d07/f0007.txt = %q", got)
	}
	if got, _ := os.ReadFile(filepath.Join(ws2, "d29/f2999.txt")); string(got) != "file 2999\n" {
		t.Errorf("restored d29/f2999.txt = %q", got)
	}
}
