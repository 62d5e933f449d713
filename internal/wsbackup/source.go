package wsbackup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Source is a history store a backup reads: a directory on this host (Dir), or a
// sandbox's agent over its channel. Either is written by the sandbox's agent, so nothing
// it gives is trusted: the index is bounded, every name checked, every blob bounded and
// hashed before it is uploaded or counted as the sandbox's.
type Source interface {
	// List returns the store's index (index.json) and its blobs.
	List(ctx context.Context) (index []byte, blobs []Blob, err error)
	// Read calls fn with each blob of want, in order, whole. The blob's bytes are the
	// source's: fn checks them.
	Read(ctx context.Context, want []Blob, fn func(sum string, data []byte) error) error
}

// Blob is a blob of a history store: its SHA-256 and its size as the source says.
type Blob struct {
	Sum  string
	Size int64
}

// Bounds of what a source gives.
const (
	// MaxIndex bounds a history's index.
	MaxIndex = 64 << 20
	// MaxBlob bounds one blob.
	MaxBlob = maxObject - 1024
)

// Dir is the history store at dir on this host.
type Dir string

// List reads the index, then walks the blobs: a blob is written before the index that
// names it, so every blob the index reaches is listed.
func (d Dir) List(context.Context) ([]byte, []Blob, error) {
	index, err := os.ReadFile(filepath.Join(string(d), "index.json"))
	if err != nil {
		return nil, nil, fmt.Errorf("the history's index: %w", err)
	}
	var out []Blob
	objects := filepath.Join(string(d), "objects")
	err = filepath.WalkDir(objects, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(objects, p)
		sum := strings.ReplaceAll(rel, string(filepath.Separator), "")
		if !validSum(sum) {
			return nil
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		out = append(out, Blob{Sum: sum, Size: fi.Size()})
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("the history's blobs: %w", err)
	}
	return index, out, nil
}

// Read reads each blob's file.
func (d Dir) Read(_ context.Context, want []Blob, fn func(string, []byte) error) error {
	for _, b := range want {
		data, err := os.ReadFile(filepath.Join(string(d), "objects", b.Sum[:2], b.Sum[2:]))
		if err != nil {
			return fmt.Errorf("blob %s: %w", b.Sum, err)
		}
		if err := fn(b.Sum, data); err != nil {
			return err
		}
	}
	return nil
}

// checkListing refuses a source's listing that is out of bounds or names what is not a
// blob, naming what was wrong.
func checkListing(index []byte, blobs []Blob) error {
	if len(index) > MaxIndex {
		return fmt.Errorf("the history's index is %d bytes, over %d: %w", len(index), MaxIndex, errdefs.ErrFailedPrecondition)
	}
	seen := make(map[string]bool, len(blobs))
	for _, b := range blobs {
		switch {
		case !validSum(b.Sum):
			return fmt.Errorf("the history lists %q, not a blob's SHA-256: %w", errdefs.Clip(b.Sum, 80), errdefs.ErrFailedPrecondition)
		case seen[b.Sum]:
			return fmt.Errorf("the history lists blob %s twice: %w", b.Sum, errdefs.ErrFailedPrecondition)
		case b.Size < 0 || b.Size > MaxBlob:
			return fmt.Errorf("the history's blob %s is %d bytes, over the bound of %d: %w", b.Sum, b.Size, int64(MaxBlob), errdefs.ErrFailedPrecondition)
		}
		seen[b.Sum] = true
	}
	return nil
}

// checkBlob refuses a blob whose bytes are not what the source listed.
func checkBlob(b Blob, data []byte) error {
	if int64(len(data)) != b.Size {
		return fmt.Errorf("the history's blob %s: %d bytes read, %d listed: %w", b.Sum, len(data), b.Size, errdefs.ErrFailedPrecondition)
	}
	if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != b.Sum {
		return fmt.Errorf("the history's blob %s does not match its hash (its content is not the blob it names): %w", b.Sum, errdefs.ErrFailedPrecondition)
	}
	return nil
}
