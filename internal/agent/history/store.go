package history

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Store layout, under the history dir:
//
//	objects/ab/cdef…   content-addressed blobs: file contents and tree (directory) manifests
//	tmp/               blobs being written; anything left here after a crash is garbage
//	index.json         the checkpoints' metadata, the undo position and the redo stack
//	statcache          per-path (size, mtime, ctime, inode, mode) → hash from the last scan
//	journal.json       present only while a restore is in progress
//	lock               held (flock) by the one History that has the store open
const (
	objectsDir   = "objects"
	tmpDir       = "tmp"
	indexFile    = "index.json"
	statFile     = "statcache"
	journalFile  = "journal.json"
	lockFile     = "lock"
	tempPrefix   = ".paddock-restore-"
	storeDirMode = 0o700
)

// blobStore keeps content-addressed blobs: a blob's name is the SHA-256 of its bytes, so
// identical content is stored once, and a blob that no longer matches its name is detected
// on read as corrupt.
type blobStore struct {
	dir string
}

func (s blobStore) path(sum string) string {
	return filepath.Join(s.dir, objectsDir, sum[:2], sum[2:])
}

func (s blobStore) has(sum string) bool {
	_, err := os.Lstat(s.path(sum))
	return err == nil
}

// put stores data, unless a blob with its hash is already there, and returns the hash and
// how many bytes of new storage it took (0 when the blob existed).
func (s blobStore) put(data []byte) (string, int64, error) {
	sum := sha256.Sum256(data)
	hexSum := hex.EncodeToString(sum[:])
	if s.has(hexSum) {
		return hexSum, 0, nil
	}
	tmp, err := os.CreateTemp(filepath.Join(s.dir, tmpDir), "blob-")
	if err != nil {
		return "", 0, storeErr("create blob", err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return "", 0, storeErr("write blob", err)
	}
	return s.commit(tmp, hexSum, int64(len(data)))
}

// putFrom copies r into a new blob while hashing it, so the stored bytes are exactly the
// hashed bytes even if the source changes while we read it.
func (s blobStore) putFrom(r io.Reader) (string, int64, error) {
	tmp, err := os.CreateTemp(filepath.Join(s.dir, tmpDir), "blob-")
	if err != nil {
		return "", 0, storeErr("create blob", err)
	}
	h := sha256.New()
	w := &blobWriter{f: tmp}
	n, err := io.Copy(io.MultiWriter(w, h), r)
	if err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		if w.err != nil { // the store's side failed (a full disk), not the source
			return "", 0, storeErr("write blob", w.err)
		}
		return "", 0, fmt.Errorf("copy into history: %w", kindOf(err))
	}
	return s.commit(tmp, hex.EncodeToString(h.Sum(nil)), n)
}

// blobWriter remembers a write error, so putFrom can tell a store that failed (ENOSPC:
// say the store is full) from a source that failed (a workspace file that went away).
type blobWriter struct {
	f   *os.File
	err error
}

func (w *blobWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if err != nil {
		w.err = err
	}
	return n, err
}

// commit makes a written temp blob durable under its hash: fsync, then rename, so a blob
// under its final name is always complete.
func (s blobStore) commit(tmp *os.File, sum string, n int64) (string, int64, error) {
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if s.has(sum) {
		tmp.Close()
		return sum, 0, nil
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", 0, storeErr("sync blob", err)
	}
	if err := tmp.Close(); err != nil {
		return "", 0, storeErr("close blob", err)
	}
	final := s.path(sum)
	if err := os.MkdirAll(filepath.Dir(final), storeDirMode); err != nil {
		return "", 0, storeErr("create blob dir", err)
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return "", 0, storeErr("store blob", err)
	}
	return sum, n, nil
}

// putAll stores blobs (keyed by their hash) as put does, and makes the file also durable
// with the last of them. Blobs are written syncBatch at a time and each batch is fsynced
// at once, so that the file system commits its journal about once for a batch rather
// than once for each blob; a batch's blobs are renamed under their hash once all of it is
// durable. also stays the caller's to rename. It returns how many bytes of new storage
// the blobs took.
func (s blobStore) putAll(blobs map[string][]byte, also *os.File) (int64, error) {
	var sums []string
	for sum := range blobs {
		if !s.has(sum) {
			sums = append(sums, sum)
		}
	}
	var n int64
	for len(sums) > syncBatch {
		m, err := s.putBatch(sums[:syncBatch], blobs, nil)
		if err != nil {
			return 0, err
		}
		n, sums = n+m, sums[syncBatch:]
	}
	m, err := s.putBatch(sums, blobs, also)
	return n + m, err
}

// syncBatch bounds the temp files putAll holds open and fsyncs at once.
const syncBatch = 64

// putBatch writes the blobs named by sums, fsyncs them with also (nil: none) at once, and
// renames them under their hash.
func (s blobStore) putBatch(sums []string, blobs map[string][]byte, also *os.File) (int64, error) {
	tmps := make([]*os.File, 0, len(sums)+1)
	defer func() {
		for _, t := range tmps {
			if t != also {
				t.Close()
				os.Remove(t.Name()) // a no-op once renamed
			}
		}
	}()
	var n int64
	for _, sum := range sums {
		tmp, err := os.CreateTemp(filepath.Join(s.dir, tmpDir), "blob-")
		if err != nil {
			return 0, storeErr("create blob", err)
		}
		tmps = append(tmps, tmp)
		if _, err := tmp.Write(blobs[sum]); err != nil {
			return 0, storeErr("write blob", err)
		}
		n += int64(len(blobs[sum]))
	}
	if also != nil {
		tmps = append(tmps, also)
	}
	if err := syncAll(tmps); err != nil {
		return 0, storeErr("sync blob", err)
	}
	for i, sum := range sums {
		if err := tmps[i].Close(); err != nil {
			return 0, storeErr("close blob", err)
		}
		final := s.path(sum)
		if err := os.MkdirAll(filepath.Dir(final), storeDirMode); err != nil {
			return 0, storeErr("create blob dir", err)
		}
		if err := os.Rename(tmps[i].Name(), final); err != nil {
			return 0, storeErr("store blob", err)
		}
	}
	return n, nil
}

// syncAll fsyncs files at the same time: a journaling file system waits for one commit
// that covers them all, where fsyncs in turn would each wait for one of their own.
func syncAll(files []*os.File) error {
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f.Sync()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// open returns a reader over blob sum that fails with ErrDataLoss at EOF if the bytes do
// not hash to sum.
func (s blobStore) open(sum string) (io.ReadCloser, error) {
	if !validSum(sum) {
		return nil, fmt.Errorf("blob name %q is not a SHA-256: %w", sum, errdefs.ErrDataLoss)
	}
	f, err := os.Open(s.path(sum))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("blob %s is missing from the history store: %w", sum[:12], errdefs.ErrDataLoss)
	}
	if err != nil {
		return nil, storeErr("open blob", err)
	}
	return &verifyingReader{f: f, h: sha256.New(), want: sum}, nil
}

func (s blobStore) read(sum string) ([]byte, error) {
	r, err := s.open(sum)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

type verifyingReader struct {
	f    *os.File
	h    hash.Hash
	want string
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	n, err := v.f.Read(p)
	v.h.Write(p[:n])
	if errors.Is(err, io.EOF) && hex.EncodeToString(v.h.Sum(nil)) != v.want {
		return n, fmt.Errorf("blob %s is corrupt (its content no longer matches its hash): %w", v.want[:12], errdefs.ErrDataLoss)
	}
	return n, err
}

func (v *verifyingReader) Close() error { return v.f.Close() }

func validSum(s string) bool {
	if len(s) != sha256.Size*2 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// writeAtomic replaces path with data so that a reader (or a crash) sees the old file or
// the new one, never a mix: temp file in the same directory, fsync, rename, fsync the dir.
func writeAtomic(path string, data []byte) error {
	return replaceFile(path, data, true)
}

// replaceFile is writeAtomic, with the fsyncs optional: a cache that may be lost or stale
// after a crash (but never torn, thanks to the rename) need not pay for them.
func replaceFile(path string, data []byte, durable bool) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+"-")
	if err != nil {
		return storeErr("create "+filepath.Base(path), err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return storeErr("write "+filepath.Base(path), err)
	}
	if durable {
		if err := tmp.Sync(); err != nil {
			tmp.Close()
			return storeErr("sync "+filepath.Base(path), err)
		}
	}
	if err := tmp.Close(); err != nil {
		return storeErr("close "+filepath.Base(path), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return storeErr("replace "+filepath.Base(path), err)
	}
	if !durable {
		return nil
	}
	return syncDir(dir)
}

func writeJSON(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	return writeAtomic(path, data)
}

// readJSON decodes path into v; a missing file leaves v alone and reports false.
func readJSON(path string, v any) (bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, storeErr("read "+filepath.Base(path), err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("history store file %s is corrupt: %v: %w", filepath.Base(path), err, errdefs.ErrDataLoss)
	}
	return true, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return storeErr("open dir", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return storeErr("sync dir", err)
	}
	return nil
}

func randomSuffix() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
