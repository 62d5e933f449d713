package history

import (
	"io"
	"io/fs"
	"maps"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"
)

// filePool writes a restore's files on a few goroutines. Each file is its own blob read,
// hash check, temporary file and rename, independent of every other file, so they overlap;
// directories, removals and links stay on the restore's own goroutine, in order. A
// directory's mode and times are set only once its files are written (see openDirs),
// since each file created in it changes its mtime.
type filePool struct {
	jobs    chan poolJob
	workers sync.WaitGroup
	mu      sync.Mutex
	err     error // the first failure; later jobs are skipped
}

type poolJob struct {
	g   *writeGroup
	run func(buf []byte) error
}

// writeGroup is the files a restore has queued: it waits for them before it sets the mode
// of the directories they are in and closes those (see openDirs).
type writeGroup struct {
	wg      sync.WaitGroup
	mu      sync.Mutex
	written map[string]statEntry
}

// copyBufSize is each worker's copy buffer: a few reads per large blob, one per small one.
const copyBufSize = 256 << 10

// RestoreWorkers is how many files a restore writes at once: one per CPU, and at least two,
// so that one file's wait on the disk overlaps another's copy.
func RestoreWorkers() int { return max(2, runtime.GOMAXPROCS(0)) }

func newFilePool(n int) *filePool {
	p := &filePool{jobs: make(chan poolJob, 4*n)}
	for range n {
		p.workers.Go(p.work)
	}
	return p
}

func (p *filePool) work() {
	buf := make([]byte, copyBufSize)
	for j := range p.jobs {
		if p.failed() == nil {
			if err := j.run(buf); err != nil {
				p.fail(err)
			}
		}
		j.g.wg.Done()
	}
}

// submit queues run in group g, or returns the pool's failure, after which nothing more
// is written.
func (p *filePool) submit(g *writeGroup, run func(buf []byte) error) error {
	if err := p.failed(); err != nil {
		return err
	}
	g.wg.Add(1)
	p.jobs <- poolJob{g: g, run: run}
	return nil
}

func (p *filePool) failed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// fail keeps the first failure.
func (p *filePool) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
	}
}

// wait waits for g's files. It returns err, the caller's own failure, if there is one
// (after making the pool skip what is still queued), else the pool's.
func (p *filePool) wait(g *writeGroup, err error) error {
	if err != nil {
		p.fail(err)
	}
	g.wg.Wait()
	if err != nil {
		return err
	}
	return p.failed()
}

// close stops the workers once the queue is drained.
func (p *filePool) close() {
	close(p.jobs)
	p.workers.Wait()
}

// remember puts a file the restore just wrote into g, for the stat cache, from the fstat
// of the file it wrote (taken after the rename, which changes its ctime), so that the scan
// that records the restore does not read back and hash every file again: a restored file
// is a new inode that no earlier scan saw. The scan still keeps such an entry only once it
// is out of the racy window, like any other.
func (g *writeGroup) remember(rel string, f *os.File, sum string) {
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return // only a cache: the scan hashes the file instead
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.written == nil {
		g.written = map[string]statEntry{}
	}
	g.written[rel] = statEntry{Key: keyOf(fi), Hash: sum}
}

// copyBlob copies src into dst through buf and says how many bytes. dst's ReadFrom is hidden, since src is not a
// file it could splice from: it would copy through a small buffer of its own.
func copyBlob(dst *os.File, src io.Reader, buf []byte) (int64, error) {
	return io.CopyBuffer(struct{ io.Writer }{dst}, src, buf)
}

// openDirs is the directories a restore holds open, in the order it opened them (each
// before those under it). A directory's mode and mtime are set once the files queued in
// it are written, since each file created in it changes its mtime: not as the restore
// leaves the directory, which would make it wait for each directory's files in turn, the
// workers idle while it opens the next, but in batches (trim) and at the end (finish).
type openDirs struct {
	dirs []*openDir
}

type openDir struct {
	root  *os.Root
	rel   string
	mode  fs.FileMode
	mtime int64
	// done: the directory's entries are all created or queued; its mode and mtime are
	// set at the next finish.
	done bool
}

// maxOpenDirs bounds the directories a restore holds open at once (one descriptor each).
const maxOpenDirs = 256

func (d *openDirs) open(root *os.Root, rel string) *openDir {
	od := &openDir{root: root, rel: rel}
	d.dirs = append(d.dirs, od)
	return od
}

// trim finishes the directories done so far once maxOpenDirs are open.
func (d *openDirs) trim(h *History) error {
	if len(d.dirs) < maxOpenDirs {
		return nil
	}
	return d.finish(h, nil)
}

// finish waits for every file queued, then sets the mode and mtime of each directory done,
// those under a directory before it, and closes it. The directories the restore is still
// in stay open, unless the restore failed (err, or a file's write failed): then every
// directory is closed as it is, and finish returns the failure.
func (d *openDirs) finish(h *History, err error) error {
	err = h.writes.wait(h.written, err)
	maps.Copy(h.cache, h.written.written) // the workers are idle now
	clear(h.written.written)
	var kept []*openDir
	for i := len(d.dirs) - 1; i >= 0; i-- {
		od := d.dirs[i]
		if err == nil && !od.done {
			kept = append(kept, od)
			continue
		}
		if err == nil {
			err = od.set()
		}
		od.root.Close()
	}
	slices.Reverse(kept)
	d.dirs = kept
	return err
}

func (od *openDir) set() error {
	if err := od.root.Chmod(".", od.mode); err != nil {
		return wsErr("chmod", od.rel, err)
	}
	t := time.Unix(0, od.mtime)
	if err := od.root.Chtimes(".", t, t); err != nil {
		return wsErr("set times", od.rel, err)
	}
	return nil
}
