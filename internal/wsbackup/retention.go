package wsbackup

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Retention says which backups are kept: each sandbox's newest KeepLast, and the newest
// of each of the KeepDaily UTC days up to today. Blobs no kept manifest names are deleted
// once they are older than Grace: a backup under way uploads its blobs before the
// manifest that names them.
type Retention struct {
	KeepLast  int
	KeepDaily int
	Grace     time.Duration
}

// Pruned is what a retention pass removed.
type Pruned struct {
	Manifests int   // backups dropped
	Blobs     int   // objects no kept backup names
	Bytes     int64 // their size in the bucket
	Kept      int   // backups kept
	// Dropped are the backups dropped, by sandbox then time.
	Dropped []Ref
}

// kept is the subset of times (any order) that r keeps at now.
func (r Retention) kept(times []time.Time, now time.Time) map[time.Time]bool {
	sorted := append([]time.Time(nil), times...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].After(sorted[j]) })
	keep := map[time.Time]bool{}
	for i := 0; i < r.KeepLast && i < len(sorted); i++ {
		keep[sorted[i]] = true
	}
	today := now.UTC().Truncate(24 * time.Hour)
	oldest := today.AddDate(0, 0, 1-r.KeepDaily)
	days := map[time.Time]bool{}
	for _, at := range sorted { // newest first: the first seen of a day is its newest
		day := at.UTC().Truncate(24 * time.Hour)
		if r.KeepDaily > 0 && !day.Before(oldest) && !day.After(today) && !days[day] {
			days[day] = true
			keep[at] = true
		}
	}
	return keep
}

// Prune applies r to every sandbox's backups under t at now: see PruneWith.
func Prune(ctx context.Context, t Target, key []byte, r Retention, now time.Time) (Pruned, error) {
	return PruneWith(ctx, t, key, r, now, PruneOptions{})
}

// PruneOptions narrow a retention pass.
type PruneOptions struct {
	// Sandbox, when set, is the only sandbox whose backups are dropped; the blobs no kept
	// backup of any sandbox names are swept all the same.
	Sandbox string
	// DryRun deletes nothing: the result says what the pass would delete.
	DryRun bool
}

// Ref names one backup.
type Ref struct {
	Sandbox string
	ID      string
}

// PruneWith applies r at now: it deletes the manifests r drops, reads every kept one
// (marking the blobs they name), then deletes the blobs nothing marked that are older
// than r.Grace. A kept manifest that cannot be read stops the sweep before any blob is
// deleted, naming it. Callers must not run a backup into the same target at the same
// time from this process (it may reuse a blob the sweep deletes); the grace spares the
// blobs of a backup from elsewhere.
func PruneWith(ctx context.Context, t Target, key []byte, r Retention, now time.Time, o PruneOptions) (Pruned, error) {
	var p Pruned
	if r.KeepLast < 1 || r.KeepDaily < 0 || r.Grace < 0 {
		return p, fmt.Errorf("retention: keep_last %d (want at least 1), keep_daily %d, grace %v: %w", r.KeepLast, r.KeepDaily, r.Grace, errdefs.ErrInvalidArgument)
	}
	if o.Sandbox != "" && !validSandbox(o.Sandbox) {
		return p, fmt.Errorf("retention: sandbox %q: %w", o.Sandbox, errdefs.ErrInvalidArgument)
	}
	k, err := derive(key)
	if err != nil {
		return p, err
	}
	bySandbox, err := manifests(ctx, t)
	if err != nil {
		return p, fmt.Errorf("retention: %w", err)
	}
	ids := make([]string, 0, len(bySandbox))
	for id := range bySandbox {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	marked, read := map[string]bool{}, map[string]bool{}
	for _, id := range ids {
		times := bySandbox[id]
		sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
		keep := r.kept(times, now)
		for _, at := range times {
			name := manifestPrefix(t, id) + at.Format(IDFormat)
			if !keep[at] && (o.Sandbox == "" || o.Sandbox == id) {
				if !o.DryRun {
					if err := t.Client.RemoveObject(ctx, t.Bucket, name, minio.RemoveObjectOptions{}); err != nil {
						return p, fmt.Errorf("retention: delete %s: %w: %w", name, errdefs.ErrUnavailable, err)
					}
				}
				p.Manifests++
				p.Dropped = append(p.Dropped, Ref{Sandbox: id, ID: at.Format(IDFormat)})
				continue
			}
			p.Kept++
			if err := k.mark(ctx, t, id, name, marked, read); err != nil {
				return p, fmt.Errorf("retention: %w (no blob was deleted)", err)
			}
		}
	}
	err = k.sweep(ctx, t, marked, now.Add(-r.Grace), o.DryRun, &p)
	return p, err
}

// mark adds the blobs manifest name of sandbox id names to marked, and its lists to
// read.
func (k keys) mark(ctx context.Context, t Target, id, name string, marked, read map[string]bool) error {
	m, err := k.manifest(ctx, t, id, name)
	if err != nil {
		return err
	}
	// Lists are shared by most backups of a sandbox: each is read once.
	var fresh []string
	for _, l := range m.Lists {
		if !read[l] {
			read[l] = true
			fresh = append(fresh, l)
		}
		marked[k.blobName(t, l)] = true
	}
	m.Lists = fresh
	sums, err := k.sums(ctx, t, name, m)
	if err != nil {
		return err
	}
	for _, sum := range sums {
		marked[k.blobName(t, sum)] = true
	}
	return nil
}

// sweep deletes the blobs not marked and last modified before cutoff (with dryRun, only
// counts them).
func (k keys) sweep(ctx context.Context, t Target, marked map[string]bool, cutoff time.Time, dryRun bool, p *Pruned) error {
	var doomed []minio.ObjectInfo
	for o := range t.Client.ListObjects(ctx, t.Bucket, minio.ListObjectsOptions{Prefix: t.Prefix + "blobs/", Recursive: true}) {
		if o.Err != nil {
			return fmt.Errorf("retention: list bucket %s: %w: %w", t.Bucket, errdefs.ErrUnavailable, o.Err)
		}
		if !marked[o.Key] && o.LastModified.Before(cutoff) {
			doomed = append(doomed, o)
		}
	}
	for _, o := range doomed {
		if dryRun {
			p.Blobs++
			p.Bytes += o.Size
			continue
		}
		if err := t.Client.RemoveObject(ctx, t.Bucket, o.Key, minio.RemoveObjectOptions{}); err != nil {
			return fmt.Errorf("retention: delete %s: %w: %w", o.Key, errdefs.ErrUnavailable, err)
		}
		p.Blobs++
		p.Bytes += o.Size
	}
	return nil
}
