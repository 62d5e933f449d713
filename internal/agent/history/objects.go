package history

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// BlobInfo is one blob of a store: its SHA-256 and its size as stored.
type BlobInfo struct {
	Sum  string
	Size int64
}

// Objects returns the store's index as last written and every blob the store holds, for a
// copy made elsewhere (a backup). A blob is written before the index that names it, so
// every blob the index reaches is listed. Refused while a transaction is open: its work is
// in no checkpoint yet.
func (h *History) Objects() ([]byte, []BlobInfo, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.finishPending(); err != nil {
		return nil, nil, err
	}
	if h.idx.Tx != nil {
		return nil, nil, h.txOpenErr("copy the history")
	}
	index, err := os.ReadFile(filepath.Join(h.dir, indexFile))
	if err != nil {
		return nil, nil, storeErr("read index", err)
	}
	var out []BlobInfo
	objects := filepath.Join(h.dir, objectsDir)
	err = filepath.WalkDir(objects, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(objects, p)
		sum := filepath.Dir(rel) + filepath.Base(rel)
		if !validSum(sum) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, BlobInfo{Sum: sum, Size: fi.Size()})
		return nil
	})
	if err != nil {
		return nil, nil, storeErr("list blobs", err)
	}
	return index, out, nil
}

// OpenObject opens blob sum as stored, without checking it: whoever receives it checks it
// against its hash. A blob the store does not hold is not found, by name.
func (h *History) OpenObject(sum string) (*os.File, int64, error) {
	if !validSum(sum) {
		return nil, 0, fmt.Errorf("blob name %q is not a SHA-256: %w", sum, errdefs.ErrInvalidArgument)
	}
	f, err := os.OpenFile(h.blobs.path(sum), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("blob %s: %w", sum, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, 0, storeErr("open blob", err)
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("blob %s is not a regular file: %w", sum, errdefs.ErrDataLoss)
	}
	return f, fi.Size(), nil
}
