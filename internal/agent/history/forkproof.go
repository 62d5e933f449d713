package history

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// A proof that a copy needs no restore. A fork over a block copy of its source's disk
// image (ForkOverCopy) restores the checkpoint over the copy: one walk of every file of
// the copy, whose inodes a fresh mount reads from the disk. That walk writes nothing when
// the source was already exactly the checkpoint at the moment its file system was frozen
// for the copy. ProveFrozen checks that moment on the source itself, while it is frozen
// (its inodes are cached there, and nothing can change under the walk), and the fork then
// records the restore without walking the copy (ForkOverProvenCopy).
//
// What the proof holds:
//   - every directory holds exactly the checkpoint's names, with its modes and times, on
//     the workspace's own file system (a mount point inside it is not in the image);
//   - every symlink has the checkpoint's target;
//   - every file's stat (size, mtime, ctime, inode, device, mode) is the one the source's
//     stat cache recorded with the checkpoint's hash for that path. ctime is set by the
//     kernel on every change and cannot be set back, so the file has not changed since
//     it was hashed; the scan leaves out of its cache a file changed within racyWindow of
//     it, whose content might have changed again within one timestamp tick.
//
// The cache is the source's agent's word, as for ForkOverCopy: a sandbox that rewrote it
// could keep in its fork a file of its own that the checkpoint does not hold.

// ProveFrozen says whether workspace, the source's workspace, frozen by the caller for
// the copy, is exactly checkpoint at ("": as ReadCheckpoint) of the store in src, as a
// restore would leave it. false with a nil error means "not proven": the fork walks.
// src and workspace are only read, through roots that follow no link out of them.
func ProveFrozen(src, at, workspace string) (bool, error) {
	cp, _, err := ReadCheckpoint(src, at)
	if err != nil {
		return false, err
	}
	store, err := os.OpenRoot(src)
	if err != nil {
		return false, storeErr("open", err)
	}
	defer store.Close()
	b, err := store.ReadFile(statFile)
	if err != nil {
		return false, nil
	}
	cache, err := decodeStatCache(b)
	if err != nil {
		return false, nil
	}
	ws, err := os.OpenRoot(workspace)
	if err != nil {
		return false, wsErr("open", ".", err)
	}
	defer ws.Close()
	fi, err := ws.Stat(".")
	if err != nil {
		return false, wsErr("stat", ".", err)
	}
	p := &prover{store: store, cache: cache, dev: keyOf(fi).Dev}
	return p.dir(ws, ".", cp.Tree)
}

// prover walks a workspace against a checkpoint's tree and the stat cache.
type prover struct {
	store *os.Root
	cache map[string]statEntry
	dev   uint64
}

// dir proves directory d (workspace path rel) holds tree sum.
func (p *prover) dir(d *os.Root, rel, sum string) (bool, error) {
	want, err := p.tree(sum)
	if err != nil {
		return false, err
	}
	names, err := readNames(d)
	if err != nil {
		return false, wsErr("read directory", rel, err)
	}
	slices.SortFunc(want, func(a, b entry) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	if len(names) != len(want) {
		return false, nil
	}
	for i, e := range want {
		if names[i] != e.Name {
			return false, nil
		}
		if ok, err := p.entry(d, path.Join(rel, e.Name), e); !ok || err != nil {
			return false, err
		}
	}
	return true, nil
}

func (p *prover) entry(d *os.Root, rel string, e entry) (bool, error) {
	fi, err := d.Lstat(e.Name)
	if err != nil {
		return false, nil // gone: not proven
	}
	k := keyOf(fi)
	if k.Dev != p.dev {
		return false, nil
	}
	switch e.Kind {
	case kindFile:
		c, ok := p.cache[rel]
		return fi.Mode().IsRegular() && ok && c.Key == k && c.Hash == e.Hash &&
			unixMode(uint32(k.Mode)) == e.Mode && k.Mtime == e.Mtime, nil
	case kindLink:
		if fi.Mode()&fs.ModeSymlink == 0 {
			return false, nil
		}
		t, err := d.Readlink(e.Name)
		return err == nil && t == e.Target, nil
	case kindDir:
		if !fi.IsDir() || unixMode(uint32(k.Mode)) != e.Mode || k.Mtime != e.Mtime {
			return false, nil
		}
		sub, err := openSubdir(d, e.Name, k.Dev, k.Ino)
		if err != nil {
			return false, nil
		}
		defer sub.Close()
		return p.dir(sub, rel, e.Hash)
	}
	return false, nil
}

// tree reads tree blob sum of the source's store: a regular file, opened without
// following a link, whose bytes hash to its name.
func (p *prover) tree(sum string) ([]entry, error) {
	if !validSum(sum) {
		return nil, fmt.Errorf("tree %q is not a SHA-256: %w", sum, errBadCache)
	}
	f, err := p.store.OpenFile(filepath.Join(objectsDir, sum[:2], sum[2:]), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, storeErr("read tree", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, storeErr("read tree", errors.New("not a regular file"))
	}
	data, err := io.ReadAll(io.LimitReader(f, maxTreeBlob))
	if err != nil {
		return nil, storeErr("read tree", err)
	}
	if s := sha256.Sum256(data); hex.EncodeToString(s[:]) != sum {
		return nil, storeErr("read tree", fmt.Errorf("blob %s is corrupt", sum[:12]))
	}
	var es []entry
	if err := jsonUnmarshal(data, &es); err != nil {
		return nil, storeErr("read tree", err)
	}
	return es, nil
}

// maxTreeBlob bounds a tree blob the proof reads: a directory of a million entries.
const maxTreeBlob = 256 << 20

// ForkOverProvenCopy is ForkOverCopy over a copy that ProveFrozen proved, while the
// source was frozen for the copy, to be exactly checkpoint at: it shares the blobs and
// carries the stat cache as ForkOverCopy does, then records the restore of at without
// walking the copy. The caller vouches for the proof.
func ForkOverProvenCopy(src, dst, at, workspace string) (ForkInfo, error) {
	cp, tx, err := ReadCheckpoint(src, at)
	if err != nil {
		return ForkInfo{}, err
	}
	info := ForkInfo{At: cp, OpenTx: tx, Proven: true}
	if err := shareAndIndex(src, dst, cp, &info, func(idx *index) {
		c := Checkpoint{ID: strconv.Itoa(idx.Seq + 1), Parent: cp.ID, Time: time.Now().UTC(), Cause: CauseRestore,
			Message: fmt.Sprintf("%s to checkpoint %s", opRestore, cp.ID), Restores: cp.ID, Tree: cp.Tree}
		idx.Seq++
		idx.Checkpoints = append(idx.Checkpoints, c)
		idx.Pos = c.ID
	}); err != nil {
		return info, err
	}
	info.Trusted, err = carryStatCache(src, dst, workspace)
	return info, err
}
