package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/paddockhq/paddock/internal/agent/history"
	"github.com/paddockhq/paddock/internal/testenv"
	"github.com/paddockhq/paddock/internal/wsbackup"
)

// backupRounds bounds the rounds of the backup table: each moves the whole workspace
// three times.
const backupRounds = 5

// BackupTable backs table 10's workspace up to SeaweedFS's S3 gateway on loopback
// (internal/wsbackup): a full backup, an incremental one after a one-file edit, and a full
// restore, against the same objects fetched by a plain minio-go GetObject loop.
func (e *Env) BackupTable(ctx context.Context, o Options) (t *Table, err error) {
	spec := benchWorkspace
	if o.Quick {
		spec = quickWorkspace
	}
	dir, err := os.MkdirTemp(e.Dir, "backup-")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	s3, stop, err := testenv.RunS3(filepath.Join(dir, "s3"))
	if errors.Is(err, testenv.ErrNoWeed) {
		return backupMissing(err.Error()), nil
	}
	if err != nil {
		return nil, err
	}
	defer stop()
	f := &backupFixture{rec: newRecorder(), dir: dir, plan: spec.plan(), s3: s3}
	if err := f.setUp(ctx); err != nil {
		return nil, err
	}
	defer f.h.Close()
	rounds := min(max(o.N, 1), backupRounds)
	if err := interleave(f.rec, 0, rounds, f.full(ctx), f.incremental(ctx), f.restore(ctx),
		f.plainFetch(ctx, "plain", 1), f.plainFetch(ctx, "plain.par", wsbackup.RestoreParallel), f.create()); err != nil {
		return nil, err
	}
	return f.table(), nil
}

type backupFixture struct {
	rec       *recorder
	dir       string
	plan      genPlan
	s3        testenv.S3
	key       []byte
	ws, store string
	h         *history.History
	fulls     int
	edits     int
	restores  int
	fetched   int64 // bytes the plain client fetched in its last round
	objects   int
	blobs     []blobFile // the history's blobs, as the restore writes them
	creates   int
}

// blobFile is one of the history's blob files: its path under objects/, and its size.
type blobFile struct {
	rel  string
	size int64
}

func (f *backupFixture) target(prefix string) wsbackup.Target {
	return wsbackup.Target{Client: f.s3.Client, Bucket: f.s3.Bucket, Prefix: prefix}
}

// setUp writes the workspace, checkpoints it, and backs it up once under inc/, where the
// incremental backups and the restores go.
func (f *backupFixture) setUp(ctx context.Context) error {
	f.key = make([]byte, wsbackup.KeySize)
	_, _ = rand.Read(f.key)
	f.ws, f.store = filepath.Join(f.dir, "ws"), filepath.Join(f.dir, "store")
	if err := f.plan.write(f.ws); err != nil {
		return fmt.Errorf("generate workspace: %w", err)
	}
	var err error
	if f.h, err = history.Open(f.ws, f.store); err != nil {
		return err
	}
	if _, _, err := f.h.Checkpoint(history.CauseManual, "initial"); err != nil {
		return err
	}
	if _, err = wsbackup.Run(ctx, f.target("inc/"), f.key, "sb-bench", f.store); err != nil {
		return err
	}
	objects := filepath.Join(f.store, "objects")
	return filepath.WalkDir(objects, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(objects, p)
		f.blobs = append(f.blobs, blobFile{rel, info.Size()})
		return nil
	})
}

// create is the floor under a restore: the history's blob files, as many and as large,
// written from memory into a new directory, createWriters at a time, with os.WriteFile.
// No fetch, no decryption: what the file system alone costs.
func (f *backupFixture) create() func() error {
	return func() error {
		f.creates++
		into := filepath.Join(f.dir, fmt.Sprintf("created-%d", f.creates))
		var largest int64
		for _, b := range f.blobs {
			largest = max(largest, b.size)
		}
		zeros := make([]byte, largest)
		start := time.Now()
		for i := range 256 {
			if err := os.MkdirAll(filepath.Join(into, fmt.Sprintf("%02x", i)), 0o700); err != nil {
				return err
			}
		}
		work := make(chan blobFile)
		errs := make(chan error, createWriters)
		for range createWriters {
			go func() {
				var first error
				for b := range work {
					if first == nil {
						first = os.WriteFile(filepath.Join(into, b.rel), zeros[:b.size], 0o400)
					}
				}
				errs <- first
			}()
		}
		for _, b := range f.blobs {
			work <- b
		}
		close(work)
		var err error
		for range createWriters {
			err = errors.Join(err, <-errs)
		}
		f.rec.add("create", time.Since(start).Seconds())
		return err // its files stay until the table ends, as restore says
	}
}

// createWriters is how many files the floor writes at once: as many as a restore.
const createWriters = 8

// full backs the history up into a fresh prefix: every object is uploaded.
func (f *backupFixture) full(ctx context.Context) func() error {
	return func() error {
		f.fulls++
		start := time.Now()
		b, err := wsbackup.Run(ctx, f.target(fmt.Sprintf("full-%d/", f.fulls)), f.key, "sb-bench", f.store)
		f.rec.add("full", time.Since(start).Seconds())
		f.rec.add("full.mb", float64(b.UploadedBytes)/1e6)
		return err
	}
}

// incremental edits one file and checkpoints (untimed), then backs up into inc/.
func (f *backupFixture) incremental(ctx context.Context) func() error {
	return func() error {
		f.edits++
		p := filepath.Join(f.ws, f.plan.editable(f.edits))
		fh, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(fh, "backup edit %d\n", f.edits)
		if err := errors.Join(err, fh.Close()); err != nil {
			return err
		}
		if _, _, err := f.h.Checkpoint(history.CauseManual, "edit"); err != nil {
			return err
		}
		start := time.Now()
		b, err := wsbackup.Run(ctx, f.target("inc/"), f.key, "sb-bench", f.store)
		f.rec.add("inc", time.Since(start).Seconds())
		f.rec.add("inc.kb", float64(b.UploadedBytes)/1e3)
		return err
	}
}

// restore fetches the newest backup in inc/ into a new history directory. Its files stay
// until the table ends: on an ext4 without a journal (as this machine's), a new file is
// not given an inode freed in the last minute or more, and the allocator checks each
// such inode in turn, so 10,000 files removed between rounds would tax the next round's
// creations, which a restore after a real loss does not pay.
func (f *backupFixture) restore(ctx context.Context) func() error {
	return func() error {
		f.restores++
		into := filepath.Join(f.dir, fmt.Sprintf("restored-%d", f.restores))
		start := time.Now()
		_, err := wsbackup.Restore(ctx, f.target("inc/"), f.key, "sb-bench", time.Time{}, into)
		f.rec.add("restore", time.Since(start).Seconds())
		return err // its files stay until the table ends, as restore says
	}
}

// plainFetch gets every object in inc/ (the blobs the restore fetches, and every backup's
// manifest and lists), at most at once (1: the plain loop, one after the other),
// and discards them; it records its time as name.
func (f *backupFixture) plainFetch(ctx context.Context, name string, at int) func() error {
	return func() error {
		start := time.Now()
		var keys []string
		for o := range f.s3.Client.ListObjects(ctx, f.s3.Bucket, minio.ListObjectsOptions{Prefix: "inc/", Recursive: true}) {
			if o.Err != nil {
				return o.Err
			}
			keys = append(keys, o.Key)
		}
		var n atomic.Int64
		work := make(chan string)
		errs := make(chan error, at)
		var wg sync.WaitGroup
		for range at {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var first error
				for key := range work {
					if first != nil {
						continue
					}
					obj, err := f.s3.Client.GetObject(ctx, f.s3.Bucket, key, minio.GetObjectOptions{})
					if err != nil {
						first = err
						continue
					}
					c, err := io.Copy(io.Discard, obj)
					obj.Close()
					n.Add(c)
					first = err
				}
				errs <- first
			}()
		}
		for _, k := range keys {
			work <- k
		}
		close(work)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				return err
			}
		}
		f.rec.add(name, time.Since(start).Seconds())
		f.fetched, f.objects = n.Load(), len(keys)
		return nil
	}
}

func backupMissing(why string) *Table {
	return &Table{Title: backupTitle, Rows: []Row{
		{Name: "incremental backup after a one-file edit", Missing: why, Target: "≤ 0.1× full"},
		{Name: "full restore", Missing: why, Target: "≤ 1.5× plain GetObject"},
	}}
}

const backupTitle = "22. Workspace backups to S3: full, incremental after a one-file edit, and restore against plain GetObject"

func (f *backupFixture) table() *Table {
	s := f.rec.summary
	r := func(a, b string) string { return ratio(s(a).P50, s(b).P50) }
	inc, full, restore, plain, par, create := s("inc"), s("full"), s("restore"), s("plain"), s("plain.par"), s("create")
	notes := []string{
		fmt.Sprintf("An incremental backup after a one-file edit uploads %.1f KB at the median (target ≤ 100 KB: %s): the edited file's blob, the trees above it, "+
			"the few lists of blob hashes that hold a changed hash, and a manifest that names the lists. It takes %.2f× a full backup (target ≤ 0.1×: %s): "+
			"it still lists the bucket's blobs and reads the history's.",
			s("inc.kb").P50, yesNo(s("inc.kb").P50 <= 100), inc.P50/full.P50, yesNo(inc.P50 <= 0.1*full.P50)),
		fmt.Sprintf("A full restore takes %.2f× the issue's plain loop, `GetObject` one object after another (target ≤ 1.5×: %s), and %.2f× the same "+
			"loop fetching %d at a time, as many as the restore fetches (within 1.5× of it: %s; the issue's target is the plain loop). Beyond the fetch, "+
			"it decrypts and hashes every object and creates each blob as a file of its own (%s files): %d fetchers hand what they opened to %d "+
			"writers, so the fetches go on while the files are created. Creating those files alone, from memory, takes %.2f× the plain loop (the "+
			"floor row). This machine's ext4 has no journal, and there the allocator skips, checking each in turn, the inodes freed in the last "+
			"minute or more: other work's removals slow file creation by an amount that moves widely from run to run. Nothing is synced: the "+
			"history a restore makes is copied where it is kept.",
			restore.P50/plain.P50, yesNo(restore.P50 <= 1.5*plain.P50), restore.P50/par.P50, wsbackup.RestoreParallel, yesNo(restore.P50 <= 1.5*par.P50),
			grouped(len(f.blobs)), wsbackup.RestoreParallel, createWriters, create.P50/plain.P50),
		"To run this table alone: `make build`, then, as root, `go run ./internal/bench/cmd -only backup`.",
	}
	return &Table{
		Notes: notes,
		Title: backupTitle,
		About: fmt.Sprintf("Table 10's generated workspace (%s files, %.0f MB; the same generator and seed) checkpointed once by internal/agent/history, "+
			"then backed up by internal/wsbackup (each object sealed with XChaCha20-Poly1305, blobs named by an HMAC of their hash) to SeaweedFS's S3 "+
			"gateway (`weed mini`, on loopback, as the tests start it) through minio-go. *Full*: the history backed up into a fresh prefix, so every "+
			"object is uploaded. *Incremental*: one text file appended to and checkpointed (untimed), then backed up into a prefix that holds the earlier "+
			"backups. *Restore*: the newest backup there fetched, each object authenticated and each blob checked against its hash, into a new history "+
			"directory. *Plain GetObject*: the same prefix's objects (the restore's, and the earlier backups' manifests and lists) fetched with minio-go's `GetObject` "+
			"in a loop and discarded: %d objects, %.0f MB; one after another (the issue's peer), and %d at a time. *Floor*: the history's %s blob files, "+
			"as large, written from memory with `os.WriteFile`, %d at a time. Interleaved, %d rounds; the restores' and the floor's files are kept until the table ends.",
			grouped(f.plan.files()), float64(f.plan.bytes())/1e6, f.objects, float64(f.fetched)/1e6, wsbackup.RestoreParallel, grouped(len(f.blobs)),
			createWriters, full.N),
		Rows: []Row{
			{Name: "full backup of the workspace's history", Unit: "s", Summary: full, Ratio: "1.00× (baseline)"},
			{Name: "*breakdown:* uploaded by the full backup", Unit: "MB", Summary: s("full.mb")},
			{Name: "incremental backup after a one-file edit", Unit: "s", Summary: inc, Ratio: r("inc", "full"), Target: "≤ 0.1× full", Met: yesNo(inc.P50 <= 0.1*full.P50)},
			{Name: "uploaded by that incremental backup", Unit: "KB", Summary: s("inc.kb"), Target: "≤ 100 KB", Met: yesNo(s("inc.kb").P50 <= 100)},
			{Name: "full restore of the newest backup", Unit: "s", Summary: restore, Ratio: r("restore", "plain"), Target: "≤ 1.5× plain GetObject", Met: yesNo(restore.P50 <= 1.5*plain.P50)},
			{Name: "plain minio-go `GetObject` loop over the same objects, one after another", Unit: "s", Summary: plain, Ratio: "1.00× (baseline)"},
			{Name: fmt.Sprintf("*peer:* the same loop, %d objects at a time", wsbackup.RestoreParallel), Unit: "s", Summary: par, Ratio: r("plain.par", "plain")},
			{Name: "*floor:* the restore's blob files written from memory, no fetch", Unit: "s", Summary: create, Ratio: r("create", "plain")},
		},
	}
}
