package history

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Entry kinds in a tree.
const (
	kindFile = "f"
	kindDir  = "d"
	kindLink = "l"
)

// modeBits are the mode bits history keeps: permissions and sticky, never setuid or setgid
// (see unixMode).
const modeBits = fs.ModePerm | fs.ModeSticky

// entry is one name in a directory's manifest (a tree blob). A directory's Hash is its own
// tree's blob, so an unchanged subtree costs nothing new and Diff can skip it whole.
type entry struct {
	Name   string      `json:"n"`
	Kind   string      `json:"k"`
	Mode   fs.FileMode `json:"m"`
	Size   int64       `json:"s,omitempty"`
	Mtime  int64       `json:"t,omitempty"` // Unix nanoseconds; files and dirs
	Hash   string      `json:"h,omitempty"` // content blob (file) or tree blob (dir)
	Target string      `json:"l,omitempty"` // symlink target, as stored, never resolved
}

// same reports whether two entries hold the same content: mtime alone is not a change.
func (e entry) same(o entry) bool {
	return e.Kind == o.Kind && e.Mode == o.Mode && e.Hash == o.Hash && e.Target == o.Target
}

// statKey is what must be unchanged for a file to be trusted without re-hashing. It holds
// ctime as well as mtime because code in the sandbox can set mtime (utimes) but not ctime.
type statKey struct {
	Size  int64
	Mtime int64
	Ctime int64
	Ino   uint64
	Dev   uint64
	Mode  fs.FileMode
}

type statEntry struct {
	Key  statKey
	Hash string
}

// racyWindow: a file changed this close to the scan's start may change again within the
// same timestamp tick after we hash it, unseen by its stat; such files are not cached.
const racyWindow = 50 * time.Millisecond

// scanner walks the workspace once, hashing only the files whose stat changed since the
// last scan.
type scanner struct {
	blobs    blobStore
	oldCache map[string]statEntry
	newCache map[string]statEntry
	trees    map[string][]byte // new tree blobs, written only if the checkpoint is kept
	cutoff   int64             // files with ctime/mtime after this are racy
	newBytes int64             // bytes of new content blobs
	// room is how many bytes of new content the scan may store before the store would be
	// over its budget, when budgeted. A scan that needs more stops (errOverBudget).
	room     int64
	budgeted bool
	// whole: room bounds the bytes of every file the scan finds (total), new or stored,
	// instead of its new bytes: whether the workspace as it is fits in the budget at all.
	whole  bool
	total  int64
	hashed int // files read and hashed
	// tooLarge is the files a scan found too large for the room it had, with their stat
	// (History.tooLarge, shared by every scan).
	tooLarge map[string]statKey

	// watch, when set, gets a watch on every directory the scan reads.
	watch *watcher
	// rescan, for a scan of what the watcher saw change, is the directories to read again
	// (the dirty ones and those above them); every other directory whose (dev, ino) is
	// the last scan's and whose watch is intact keeps its tree from prevDirs. nil: read
	// everything.
	rescan   map[string]bool
	prevDirs map[string]dirState
	// dirs is every directory's state as this scan found it, for the next scan.
	dirs map[string]dirState
	// inPlace: newCache is oldCache, updated in place (a scan of a few directories keeps
	// every other entry); cacheChanged says whether it was.
	inPlace, cacheChanged bool
}

// dirState is what a scan learnt of one directory: its tree, and which directory it was.
type dirState struct {
	hash     string
	dev, ino uint64
}

// scanDir builds the tree of the directory dir (workspace path rel) and returns its hash.
// full says that no directory under it may keep its last tree (see rescan).
func (s *scanner) scanDir(dir *os.Root, rel string, full bool) (string, error) {
	d, err := dir.Open(".")
	if err != nil {
		return "", wsErr("read directory", rel, err)
	}
	defer d.Close()
	if s.watch != nil { // before the readdir: a change is either read or reported
		s.watch.add(rel, int(d.Fd()))
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return "", wsErr("read directory", rel, err)
	}
	slices.Sort(names)
	dirfd := int(d.Fd())
	entries := make([]entry, 0, len(names))
	for _, name := range names {
		e, ok, err := s.scanEntry(dir, dirfd, rel, name, full)
		if err != nil {
			return "", err
		}
		if ok {
			entries = append(entries, e)
		}
	}
	data, err := json.Marshal(entries)
	if err != nil {
		return "", fmt.Errorf("encode tree %q: %w", rel, err)
	}
	sum := sumHex(data)
	s.trees[sum] = data
	return sum, nil
}

// scanEntry records one name, with one fstatat on the open directory that never follows a
// symlink. Symlinks are recorded as links; FIFOs, sockets and devices are skipped (ok
// false): they are not content and opening one could hang or have side effects.
func (s *scanner) scanEntry(dir *os.Root, dirfd int, parent, name string, full bool) (entry, bool, error) {
	rel := path.Join(parent, name)
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return entry{}, false, nil // deleted while we walked
	}
	if err != nil {
		return entry{}, false, wsErr("stat", rel, err)
	}
	key := statKey{Size: st.Size, Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano(), Ino: st.Ino, Dev: st.Dev, Mode: fs.FileMode(st.Mode)}
	e := entry{Name: name, Mode: unixMode(st.Mode), Mtime: key.Mtime}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		target, err := readlinkat(dirfd, name)
		if err != nil {
			return entry{}, false, wsErr("read link", rel, err)
		}
		return entry{Name: name, Kind: kindLink, Target: target}, true, nil
	case unix.S_IFDIR:
		e.Kind = kindDir
		prev, known := s.prevDirs[rel]
		same := known && prev.dev == st.Dev && prev.ino == st.Ino && s.watch != nil && s.watch.watching(rel)
		if s.rescan != nil && !full && !s.rescan[rel] && same {
			e.Hash = prev.hash // nothing under it changed since it was last read
			return e, true, nil
		}
		sub, err := openSubdir(dir, name, st.Dev, st.Ino)
		if err != nil {
			return entry{}, false, wsErr("open directory", rel, err)
		}
		defer sub.Close()
		// A directory read again that is not the one last read here, or that no event
		// marked, is new to the watcher: everything under it is read.
		e.Hash, err = s.scanDir(sub, rel, full || !same || !s.rescan[rel])
		if err == nil && s.dirs != nil {
			s.dirs[rel] = dirState{hash: e.Hash, dev: st.Dev, ino: st.Ino}
		}
		return e, err == nil, err
	case unix.S_IFREG:
		e.Kind = kindFile
		return s.scanFile(dir, rel, name, e, key)
	}
	return entry{}, false, nil
}

func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// unixMode keeps the permission and sticky bits of a st_mode, as fs bits. Setuid and
// setgid are not kept: a restore never makes a set-id file (the container's seccomp filter
// would refuse it anyway; see internal/sandbox/container's withoutSetID).
func unixMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	if m&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// smallFile is read into memory whole, so that re-hashing a file whose content is already
// stored writes nothing; larger files stream into a temp blob as they are hashed.
const smallFile = 1 << 20

func (s *scanner) scanFile(dir *os.Root, rel, name string, e entry, key statKey) (entry, bool, error) {
	if s.whole {
		if s.total += key.Size; s.total > s.room {
			return entry{}, false, fmt.Errorf("%d bytes of files up to %q: %w", s.total, rel, errOverBudget)
		}
	}
	if c, ok := s.oldCache[rel]; ok && c.Key == key {
		e.Size, e.Hash = key.Size, c.Hash
		s.remember(rel, key, c.Hash)
		return e, true, nil
	}
	f, err := dir.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return entry{}, false, nil
	}
	if err != nil {
		return entry{}, false, wsErr("open", rel, err)
	}
	defer f.Close()
	// What we opened is what we record: if the name was swapped after fstatat, fstat tells.
	ofi, err := f.Stat()
	if err != nil {
		return entry{}, false, wsErr("stat", rel, err)
	}
	if !ofi.Mode().IsRegular() {
		return entry{}, false, nil
	}
	// A file found too large before, unchanged since, is not read again while it still
	// does not fit: the watcher would otherwise hash it at every try.
	if k, ok := s.tooLarge[rel]; ok && k == keyOf(ofi) && s.budgeted && ofi.Size() > s.room-s.newBytes {
		return entry{}, false, fmt.Errorf("%q, %d bytes: %w", rel, ofi.Size(), errOverBudget)
	}
	s.hashed++
	head, err := io.ReadAll(io.LimitReader(f, smallFile+1))
	if err != nil {
		return entry{}, false, wsErr("read", rel, err)
	}
	var sum string
	var n int64
	switch {
	case len(head) <= smallFile:
		sum, n, err = s.blobs.put(head)
	case s.likelyStored(rel, ofi.Size()):
		sum, n, err = s.putLarge(f, head, math.MaxInt64)
	case s.budgeted && ofi.Size() > s.room-s.newBytes:
		// Too large for the room left unless it is stored already: hashed first, and not
		// copied into the store at all when it does not fit.
		sum, n, err = s.putLarge(f, head, s.room-s.newBytes)
	default:
		sum, n, err = s.blobs.putFrom(io.MultiReader(bytes.NewReader(head), f))
	}
	if errors.Is(err, errOverBudget) {
		if s.tooLarge != nil {
			s.tooLarge[rel] = keyOf(ofi)
		}
		return entry{}, false, fmt.Errorf("%q, %w", rel, err)
	}
	if err != nil {
		return entry{}, false, fmt.Errorf("checkpoint %q (the workspace is untouched): %w", rel, err)
	}
	s.newBytes += n
	if s.budgeted && n > 0 && s.newBytes > s.room {
		return entry{}, false, fmt.Errorf("%q (%d bytes): %w", rel, n, errOverBudget)
	}
	key = keyOf(ofi)
	e.Mode, e.Mtime, e.Size, e.Hash = ofi.Mode()&modeBits, ofi.ModTime().UnixNano(), key.Size, sum
	s.remember(rel, key, sum)
	return e, true, nil
}

// likelyStored guesses that a large file's content is already a blob: the last scan saw
// a file of the same size at the same path (a file touched, chmod'ed, or restored as a new
// inode). Then it is cheaper to hash it first and copy it into the store only if that
// blob is missing than to stream all of it into store/tmp and throw the copy away.
func (s *scanner) likelyStored(rel string, size int64) bool {
	c, ok := s.oldCache[rel]
	return ok && c.Key.Size == size
}

// putLarge hashes the rest of f after head and, if no blob has that hash, reads f again
// from the start into a new blob (putFrom, which hashes what it copies: if the file
// changed in between, the blob is its new content under its own hash).
// A file that is not stored yet and is larger than room is not copied: errOverBudget.
func (s *scanner) putLarge(f *os.File, head []byte, room int64) (string, int64, error) {
	h := sha256.New()
	h.Write(head)
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("read: %w", kindOf(err))
	}
	if sum := hex.EncodeToString(h.Sum(nil)); s.blobs.has(sum) {
		return sum, 0, nil
	}
	if size := int64(len(head)) + n; size > room {
		return "", 0, fmt.Errorf("%d bytes: %w", size, errOverBudget)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", 0, fmt.Errorf("read: %w", kindOf(err))
	}
	return s.blobs.putFrom(f)
}

func (s *scanner) remember(rel string, key statKey, sum string) {
	if key.Mtime >= s.cutoff || key.Ctime >= s.cutoff {
		return
	}
	e := statEntry{Key: key, Hash: sum}
	if s.inPlace {
		if s.newCache[rel] == e {
			return
		}
		s.cacheChanged = true
	}
	s.newCache[rel] = e
}

func keyOf(fi fs.FileInfo) statKey {
	k := statKey{Size: fi.Size(), Mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		k.Ctime = st.Ctim.Nano()
		k.Ino = st.Ino
		k.Dev = st.Dev
		k.Mode = fs.FileMode(st.Mode)
	}
	return k
}

// openSubdir opens name under dir as a root of its own and checks it is the directory
// (dev, ino) just stat'ed: os.Root would follow a symlink swapped in meanwhile (within dir),
// and history must never record or write through a link as if it were a directory.
func openSubdir(dir *os.Root, name string, dev, ino uint64) (*os.Root, error) {
	sub, err := dir.OpenRoot(name)
	if err != nil {
		return nil, err
	}
	got, err := sub.Stat(".")
	if err != nil {
		sub.Close()
		return nil, err
	}
	st, ok := got.Sys().(*syscall.Stat_t)
	if !ok || st.Dev != dev || st.Ino != ino {
		sub.Close()
		return nil, fmt.Errorf("directory was replaced while in use: %w", errdefs.ErrPermissionDenied)
	}
	return sub, nil
}

func readNames(dir *os.Root) ([]string, error) {
	f, err := dir.Open(".")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}
