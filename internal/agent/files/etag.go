package files

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// A content tag (ETag) names a file's bytes: the first 128 bits of their SHA-256, in hex.
// A hash rather than mtime, size and inode: two writes within one tick of the
// filesystem's coarse clock, of the same size, in place (an editor, a build), keep all
// three, and a save over such a change would be silent; a hash is exact whatever the
// filesystem (9p in a microVM included). It costs one more read of a file opened whole.
const etagBytes = 16

// newTagger returns the hash a tag is made from.
func newTagger() hash.Hash { return sha256.New() }

func tagOf(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)[:etagBytes]) }

// etagOf is the tag of what r holds from its start.
func etagOf(r io.Reader) (string, error) {
	h := newTagger()
	if _, err := io.Copy(h, r); err != nil {
		return "", err
	}
	return tagOf(h), nil
}

// checkMatch compares the tag of the file base in dir now with want, the one a
// conditional Write was based on. p is the caller's path, for errors.
func (s *Service) checkMatch(dir *os.Root, base, p, want string) error {
	f, err := dir.OpenFile(base, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("write %q: the file was deleted since it was read (If-Match %s); read it again, or save without If-Match to create it: %w", p, errdefs.Clip(want, 64), errdefs.ErrStale)
	}
	if err != nil {
		return s.fsError("write", p, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return s.fsError("write", p, err)
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("write %q: is no longer a regular file (If-Match %s): %w", p, errdefs.Clip(want, 64), errdefs.ErrStale)
	}
	got, err := etagOf(f)
	if err != nil {
		return s.fsError("write", p, err)
	}
	if got != want {
		return fmt.Errorf("write %q: the file changed since it was read (If-Match %s, the file's ETag is now %s); read it again and merge, or save without If-Match to overwrite: %w", p, errdefs.Clip(want, 64), got, errdefs.ErrStale)
	}
	return nil
}
