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
	ok, _, err := ProveFrozenWhy(src, at, workspace)
	return ok, err
}

// ProveFrozenWhy is ProveFrozen, saying what it could not prove.
func ProveFrozenWhy(src, at, workspace string) (bool, string, error) {
	cp, _, err := ReadCheckpoint(src, at)
	if err != nil {
		return false, "", err
	}
	store, err := os.OpenRoot(src)
	if err != nil {
		return false, "", storeErr("open", err)
	}
	defer store.Close()
	// Without a cache (or one that does not parse), every file is read, within the budget.
	cache := map[string]statEntry{}
	if b, err := store.ReadFile(statFile); err == nil {
		if m, err := decodeStatCache(b); err == nil {
			cache = m
		}
	}
	ws, err := os.OpenRoot(workspace)
	if err != nil {
		return false, "", wsErr("open", ".", err)
	}
	defer ws.Close()
	fi, err := ws.Stat(".")
	if err != nil {
		return false, "", wsErr("stat", ".", err)
	}
	p := &prover{store: store, cache: cache, dev: keyOf(fi).Dev, budget: hashBudget}
	ok, err := p.dir(ws, ".", cp.Tree)
	return ok, p.why, err
}

// prover walks a workspace against a checkpoint's tree and the stat cache.
type prover struct {
	store *os.Root
	cache map[string]statEntry
	dev   uint64
	// budget is what is left to read of files the cache does not vouch for; hashed
	// counts the files read.
	budget int64
	hashed int
	// why says what was not proven.
	why string
}

// no records why rel is not proven, and says false.
func (p *prover) no(rel, why string) bool {
	p.why = rel + ": " + why
	return false
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
		return p.no(rel, fmt.Sprintf("%d names, the checkpoint %d", len(names), len(want))), nil
	}
	for i, e := range want {
		if names[i] != e.Name {
			return p.no(rel, fmt.Sprintf("holds %q, the checkpoint %q", names[i], e.Name)), nil
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
		return p.no(rel, "gone"), nil
	}
	k := keyOf(fi)
	if k.Dev != p.dev {
		return p.no(rel, "on another file system"), nil
	}
	switch e.Kind {
	case kindFile:
		c, ok := p.cache[rel]
		switch {
		case !fi.Mode().IsRegular():
			return p.no(rel, "not a file"), nil
		case unixMode(uint32(k.Mode)) != e.Mode || k.Mtime != e.Mtime:
			return p.no(rel, "another mode or mtime"), nil
		case ok && c.Key == k:
			if c.Hash != e.Hash {
				return p.no(rel, "cached with another content"), nil
			}
			return true, nil
		}
		// Not cached (changed within the racy window of the last scan that read it), or
		// changed since: its content, read under the freeze, within the proof's budget.
		return p.hash(d, rel, e, k)
	case kindLink:
		if fi.Mode()&fs.ModeSymlink == 0 {
			return p.no(rel, "not a symlink"), nil
		}
		if t, err := d.Readlink(e.Name); err != nil || t != e.Target {
			return p.no(rel, "another target"), nil
		}
		return true, nil
	case kindDir:
		if !fi.IsDir() || unixMode(uint32(k.Mode)) != e.Mode || k.Mtime != e.Mtime {
			return p.no(rel, "not a directory of the checkpoint's mode and mtime"), nil
		}
		sub, err := openSubdir(d, e.Name, k.Dev, k.Ino)
		if err != nil {
			return p.no(rel, "not a directory"), nil
		}
		defer sub.Close()
		return p.dir(sub, rel, e.Hash)
	}
	return p.no(rel, "of no kind a checkpoint holds"), nil
}

// hash proves file e (workspace path rel, stat k) by hashing its content, when the
// proof's budget for that is not spent.
func (p *prover) hash(d *os.Root, rel string, e entry, k statKey) (bool, error) {
	cost := max(k.Size, hashCost)
	if cost > p.budget {
		return p.no(rel, "not in the stat cache, and the proof's budget for reading files is spent"), nil
	}
	p.budget -= cost
	f, err := d.OpenFile(e.Name, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return p.no(rel, "unreadable"), nil
	}
	defer f.Close()
	// What is read is what was stat'ed: the same inode, unchanged.
	if fi, err := f.Stat(); err != nil || keyOf(fi) != k {
		return p.no(rel, "changed while proven"), nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, k.Size+1)); err != nil {
		return p.no(rel, "unreadable"), nil
	}
	if hex.EncodeToString(h.Sum(nil)) != e.Hash {
		return p.no(rel, "another content"), nil
	}
	p.hashed++
	return true, nil
}

// The proof reads at most hashBudget bytes of files its stat cache does not vouch for,
// each counted as at least hashCost: it runs while the source is frozen, beside the copy.
const (
	hashBudget = 32 << 20
	hashCost   = 4 << 10
)

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
