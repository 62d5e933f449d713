package history

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Overlay xattrs of a metacopy file: its data is elsewhere, at the redirect's path in a
// data-only lower layer (overlayfs, Linux 6.5 and later).
const (
	xattrMetacopy = "trusted.overlay.metacopy"
	xattrRedirect = "trusted.overlay.redirect"
)

// LayerInfo says what ForkLayer made.
type LayerInfo struct {
	ForkInfo
	// Files counts the files written as metadata only.
	Files int
}

// ForkLayer is a fork whose workspace is not written: it shares src's blobs with dst, as
// Fork does, and writes checkpoint at's tree into meta as metadata only: directories,
// symlinks, and for each file an empty (sparse) file of its size, mode, owner and mtime
// whose content overlayfs finds by its redirect xattr in dst's objects. Mounted as
//
//	overlay -o metacopy=on,redirect_dir=on,lowerdir=META::DST/objects,upperdir=…,workdir=…
//
// the tree reads as the checkpoint's files, and a write copies the file it changes up into
// the upper directory, the fork's own. Setting trusted xattrs needs CAP_SYS_ADMIN.
func ForkLayer(src, dst, at, meta string, uid, gid int) (LayerInfo, error) {
	cp, tx, err := ReadCheckpoint(src, at)
	if err != nil {
		return LayerInfo{}, err
	}
	info := LayerInfo{ForkInfo: ForkInfo{At: cp, OpenTx: tx}}
	began := time.Now()
	if err := shareBlobs(src, dst, &info.ForkInfo); err != nil {
		return info, err
	}
	info.Shared = time.Since(began)
	var idx index
	if _, err := readJSON(filepath.Join(src, indexFile), &idx); err != nil {
		return info, err
	}
	idx.Pos, idx.Redo, idx.ForkedBy, idx.Tx = cp.ID, nil, "", nil
	if err := writeJSON(filepath.Join(dst, indexFile), &idx); err != nil {
		return info, err
	}
	l := layerWriter{blobs: blobStore{dir: dst}, uid: uid, gid: gid}
	if err := os.MkdirAll(meta, 0o755); err != nil {
		return info, storeErr("create layer", err)
	}
	if err := l.tree(cp.Tree, meta); err != nil {
		return info, fmt.Errorf("fork: layer of checkpoint %s: %w", cp.ID, err)
	}
	info.Files = l.files
	return info, nil
}

type layerWriter struct {
	blobs    blobStore
	uid, gid int
	files    int
}

// tree writes the entries of tree blob sum into dir, which exists.
func (l *layerWriter) tree(sum, dir string) error {
	if sum == "" {
		return nil
	}
	data, err := l.blobs.read(sum)
	if err != nil {
		return err
	}
	var es []entry
	if err := jsonUnmarshal(data, &es); err != nil {
		return fmt.Errorf("tree %s is corrupt: %v: %w", sum[:12], err, errdefs.ErrDataLoss)
	}
	for _, e := range es {
		if err := checkName(e.Name); err != nil {
			return err
		}
		p := filepath.Join(dir, e.Name)
		switch e.Kind {
		case kindDir:
			if err := os.Mkdir(p, 0o700); err != nil {
				return storeErr("layer dir", err)
			}
			if err := l.tree(e.Hash, p); err != nil {
				return err
			}
			if err := l.meta(p, e); err != nil {
				return err
			}
		case kindLink:
			if err := os.Symlink(e.Target, p); err != nil {
				return storeErr("layer symlink", err)
			}
			if err := os.Lchown(p, l.uid, l.gid); err != nil {
				return storeErr("layer symlink", err)
			}
		case kindFile:
			if err := l.file(p, e); err != nil {
				return err
			}
		}
	}
	return nil
}

// file writes e as an empty file of its size whose data is its blob.
func (l *layerWriter) file(p string, e entry) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return storeErr("layer file", err)
	}
	defer f.Close()
	fd := int(f.Fd())
	if e.Size > 0 {
		if err := unix.Ftruncate(fd, e.Size); err != nil {
			return storeErr("layer file", err)
		}
		if err := unix.Fsetxattr(fd, xattrMetacopy, nil, 0); err != nil {
			return storeErr("layer file", err)
		}
		if err := unix.Fsetxattr(fd, xattrRedirect, []byte("/"+e.Hash[:2]+"/"+e.Hash[2:]), 0); err != nil {
			return storeErr("layer file", err)
		}
	}
	l.files++
	if err := unix.Fchown(fd, l.uid, l.gid); err != nil {
		return storeErr("layer file", err)
	}
	if err := unix.Fchmod(fd, uint32(e.Mode.Perm())); err != nil {
		return storeErr("layer file", err)
	}
	t := unix.NsecToTimespec(e.Mtime)
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{t, t}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return storeErr("layer file", err)
	}
	return nil
}

// meta gives directory p e's owner, mode and mtime, once its entries are written.
func (l *layerWriter) meta(p string, e entry) error {
	if err := os.Lchown(p, l.uid, l.gid); err != nil {
		return storeErr("layer dir", err)
	}
	if err := os.Chmod(p, e.Mode.Perm()); err != nil {
		return storeErr("layer dir", err)
	}
	t := unix.NsecToTimespec(e.Mtime)
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{t, t}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return storeErr("layer dir", err)
	}
	return nil
}
