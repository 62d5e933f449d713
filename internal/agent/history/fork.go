package history

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// ForkInfo says what Fork made.
type ForkInfo struct {
	// At is the checkpoint the fork starts from.
	At Checkpoint
	// OpenTx is the transaction the source had open, which the fork does not hold (it
	// starts from the state before it); nil when there was none.
	OpenTx *Transaction
	// Linked and Cloned count the blobs shared by hard link and by reflink (FICLONE).
	Linked, Cloned int
	// Shared is how long sharing the blobs took; the rest of a fork writes the files.
	Shared time.Duration
	// Trusted counts the source's stat cache entries the fork kept (ForkOverCopy).
	Trusted int
	// Proven: the copy was proven to be the checkpoint, so the fork did not walk it
	// (ForkOverProvenCopy).
	Proven bool
}

// ReadCheckpoint checks that the store in dir holds checkpoint at ("" is the current
// position, or with a transaction open the state before it) without opening the store,
// which its agent may hold: it reads the index as last written.
func ReadCheckpoint(dir, at string) (Checkpoint, *Transaction, error) {
	var idx index
	ok, err := readJSON(filepath.Join(dir, indexFile), &idx)
	if err != nil {
		return Checkpoint{}, nil, err
	}
	if at == "" {
		at = idx.Pos
		if idx.Tx != nil {
			at = idx.Tx.Base
		}
	}
	if ok && at != "" {
		for _, c := range idx.Checkpoints {
			if c.ID == at {
				return c, idx.Tx, nil
			}
		}
	}
	if at == "" {
		return Checkpoint{}, idx.Tx, fmt.Errorf("the history has no checkpoint yet: %w", errdefs.ErrFailedPrecondition)
	}
	return Checkpoint{}, idx.Tx, fmt.Errorf("checkpoint %q: %w", at, errdefs.ErrNotFound)
}

// Fork makes dst (a new, empty store) a history of workspace (a new, empty directory)
// that starts from checkpoint at of the store in src ("": as ReadCheckpoint), and puts
// that checkpoint's files into workspace. src is only read, and may be in use.
//
// Blobs are immutable once named, so dst shares them: a reflink where the file system has
// them (an inode of dst's own), else a hard link, made read-only (0444) for both stores so
// that either may own it and both may read it. The workspace's files are the fork's own:
// written from the blobs as a restore writes them, never links. dst's timeline is src's
// up to at, then one restore of at.
func Fork(src, dst, at, workspace string, opts ...Option) (ForkInfo, error) {
	return fork(src, dst, at, workspace, false, opts...)
}

// ForkOverCopy is Fork over a workspace that is a block copy of src's own (its disk
// image, copied while frozen): the same file system, inodes and times, on another device.
// dst gets src's stat cache with that device, so the restore rewrites only the files that
// changed since src's last scan, and removes what the checkpoint does not hold.
//
// The cache is src's agent's word: a sandbox that rewrote it could keep a file of its own
// in the fork that its checkpoint does not hold. The fork is its own user's, who could put
// that file into a checkpoint anyway; a cache that does not parse is ignored.
func ForkOverCopy(src, dst, at, workspace string, opts ...Option) (ForkInfo, error) {
	return fork(src, dst, at, workspace, true, opts...)
}

func fork(src, dst, at, workspace string, overCopy bool, opts ...Option) (ForkInfo, error) {
	cp, tx, err := ReadCheckpoint(src, at)
	if err != nil {
		return ForkInfo{}, err
	}
	info := ForkInfo{At: cp, OpenTx: tx}
	if err := shareAndIndex(src, dst, cp, &info, nil); err != nil {
		return info, err
	}
	if overCopy {
		if info.Trusted, err = carryStatCache(src, dst, workspace); err != nil {
			return info, err
		}
	}
	h, err := Open(workspace, dst, opts...)
	if err != nil {
		return info, err
	}
	defer h.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, err := h.run(journal{Op: opRestore, Target: cp.ID, Seq: h.idx.Seq}, ""); err != nil {
		return info, fmt.Errorf("fork: write checkpoint %s's files: %w", cp.ID, err)
	}
	return info, nil
}

// shareAndIndex gives dst src's blobs and its index at checkpoint cp, with no redo and no
// transaction; edit, when set, changes the index before it is written.
func shareAndIndex(src, dst string, cp Checkpoint, info *ForkInfo, edit func(*index)) error {
	began := time.Now()
	if err := shareBlobs(src, dst, info); err != nil {
		return err
	}
	info.Shared = time.Since(began)
	var idx index
	if _, err := readJSON(filepath.Join(src, indexFile), &idx); err != nil {
		return err
	}
	idx.Pos, idx.Redo, idx.ForkedBy, idx.Tx = cp.ID, nil, "", nil
	if edit != nil {
		edit(&idx)
	}
	return writeJSON(filepath.Join(dst, indexFile), &idx)
}

// carryStatCache writes src's stat cache into dst with every entry on workspace's device,
// and says how many entries it holds. It is read through a root of src, never following a
// link out of it.
func carryStatCache(src, dst, workspace string) (int, error) {
	var st unix.Stat_t
	if err := unix.Stat(workspace, &st); err != nil {
		return 0, wsErr("stat", ".", err)
	}
	root, err := os.OpenRoot(src)
	if err != nil {
		return 0, storeErr("open", err)
	}
	defer root.Close()
	b, err := root.ReadFile(statFile)
	if err != nil {
		return 0, nil // no cache: every file is compared with its blob by the restore
	}
	m, err := decodeStatCache(b)
	if err != nil {
		return 0, nil
	}
	for p, e := range m {
		e.Key.Dev = st.Dev
		m[p] = e
	}
	if err := replaceFile(filepath.Join(dst, statFile), encodeStatCache(m), false); err != nil {
		return 0, err
	}
	return len(m), nil
}

// shareBlobs gives dst every blob of src: reflinked where it can, else hard-linked.
// src is written by the sandbox's agent and read here by the host: its objects are read
// through an os.Root (no symlink leads out of it), and a blob is reflinked from a
// descriptor opened without following a link, or hard-linked by name (linkat never
// follows one) and then checked, in dst, which no sandbox reaches yet, to be a regular
// file: anything else linked meanwhile is removed again.
func shareBlobs(src, dst string, info *ForkInfo) error {
	for _, d := range []string{dst, filepath.Join(dst, objectsDir), filepath.Join(dst, tmpDir)} {
		if err := os.MkdirAll(d, storeDirMode); err != nil {
			return storeErr("create", err)
		}
	}
	root, err := os.OpenRoot(filepath.Join(src, objectsDir))
	if err != nil {
		return storeErr("read blobs", err)
	}
	defer root.Close()
	dirs, err := readEntries(root, ".")
	if err != nil {
		return storeErr("read blobs", err)
	}
	// Directories in parallel: a link or a clone is a metadata transaction of its own,
	// and those of different directories do not wait for each other.
	names := make(chan string)
	sharers := make([]sharer, RestoreWorkers())
	var wg sync.WaitGroup
	for i := range sharers {
		s := &sharers[i]
		s.reflinks = true
		wg.Go(func() {
			for name := range names {
				if s.err == nil {
					s.err = s.dir(root, name, filepath.Join(dst, objectsDir, name))
				}
			}
		})
	}
	for _, d := range dirs {
		if d.IsDir() {
			names <- d.Name()
		}
	}
	close(names)
	wg.Wait()
	var errs []error
	for _, s := range sharers {
		info.Linked += s.linked
		info.Cloned += s.cloned
		errs = append(errs, s.err)
	}
	return errors.Join(errs...)
}

// sharer shares one store's blobs with another, directory by directory.
type sharer struct {
	linked, cloned int   // blobs shared by hard link and by reflink
	reflinks       bool  // until the first clone fails as unsupported
	err            error // the first failure, after which it shares no more
}

// dir shares the blobs of directory name of root with the directory to.
func (s *sharer) dir(root *os.Root, name, to string) error {
	if err := os.Mkdir(to, storeDirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return storeErr("create blob dir", err)
	}
	from, err := root.OpenFile(name, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return storeErr("read blobs", err)
	}
	defer from.Close()
	blobs, err := from.ReadDir(-1)
	if err != nil {
		return storeErr("read blobs", err)
	}
	into, err := os.Open(to)
	if err != nil {
		return storeErr("create blob dir", err)
	}
	defer into.Close()
	for _, b := range blobs {
		if !b.Type().IsRegular() {
			continue
		}
		if s.reflinks {
			done, err := s.clone(root, path.Join(name, b.Name()), filepath.Join(to, b.Name()))
			if err != nil {
				return err
			}
			if done {
				continue
			}
		}
		if err := s.link(int(from.Fd()), int(into.Fd()), b.Name()); err != nil {
			return err
		}
	}
	return nil
}

// clone reflinks blob rel of root to to, and says whether it did; the first clone the
// file system refuses as unsupported turns reflinks off.
func (s *sharer) clone(root *os.Root, rel, to string) (bool, error) {
	in, err := root.OpenFile(rel, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return false, storeErr("read blob", err)
	}
	defer in.Close()
	if fi, err := in.Stat(); err != nil || !fi.Mode().IsRegular() {
		return true, nil // swapped for something else since it was listed: not a blob
	}
	err = reflink(in, to)
	if err == nil {
		s.cloned++
		return true, nil
	}
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EXDEV) && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOTTY) {
		return false, storeErr("clone blob", err)
	}
	s.reflinks = false
	return false, nil
}

// link hard-links blob name from directory from into directory into (descriptors), then
// checks what it linked: a regular file, made read-only (0444) for both stores, that
// either may own and both may read; anything else is unlinked again.
func (s *sharer) link(from, into int, name string) error {
	if err := unix.Linkat(from, name, into, name, 0); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // gone since it was listed (the source dropped it)
		}
		return storeErr("link blob", err)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(into, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return storeErr("link blob", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		if err := unix.Unlinkat(into, name, 0); err != nil {
			return storeErr("link blob", err)
		}
		return nil
	}
	// An earlier fork made it read-only already; a chmod would write its inode again.
	if st.Mode&0o7777 != 0o444 {
		fd, err := unix.Openat(into, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return storeErr("share blob", err)
		}
		err = unix.Fchmod(fd, 0o444)
		unix.Close(fd)
		if err != nil {
			return storeErr("share blob", err)
		}
	}
	s.linked++
	return nil
}

// readEntries lists directory rel of root.
func readEntries(root *os.Root, rel string) ([]fs.DirEntry, error) {
	f, err := root.OpenFile(rel, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadDir(-1)
}

// reflink makes to a clone of in's extents (FICLONE): a file of its own that shares in's
// blocks until either is written. A file system without reflinks fails with EOPNOTSUPP (or
// EXDEV, EINVAL) and leaves no file behind.
func reflink(in *os.File, to string) error {
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o400)
	if err != nil {
		return err
	}
	if err := unix.IoctlFileClone(int(out.Fd()), int(in.Fd())); err != nil {
		out.Close()
		os.Remove(to)
		return err
	}
	return out.Close()
}
