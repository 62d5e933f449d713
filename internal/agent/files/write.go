package files

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"

	"google.golang.org/grpc"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire/agentv1"
)

// tempPrefix starts the names of Write's temp files, so a leftover one (after a crash of
// the agent itself) is recognisable.
const tempPrefix = ".paddock-write-"

type writeStream = grpc.ClientStreamingServer[agentv1.WriteRequest, agentv1.FileInfo]

func (s *Service) write(stream writeStream) (*agentv1.FileInfo, error) {
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("write: empty stream, the first message must name the file: %w", errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return nil, err
	}
	mode, err := parseMode(first.GetMode(), 0o644)
	if err != nil {
		return nil, fmt.Errorf("write %q: %w", first.GetPath(), err)
	}
	dir, rel, err := s.writeTarget(first)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	return s.writeInto(stream, first, dir, rel, mode)
}

// writeTarget opens the directory the file goes into as a root of its own, so the temp file
// and the final rename both happen in the directory we checked, whatever is renamed meanwhile.
func (s *Service) writeTarget(first *agentv1.WriteRequest) (dir *os.Root, rel string, err error) {
	p := first.GetPath()
	if rel, err = resolve(p); err != nil {
		return nil, "", err
	}
	if rel == "." {
		return nil, "", fmt.Errorf("write %q: is the workspace directory: %w", p, errdefs.ErrInvalidArgument)
	}
	if first.GetMakeParents() {
		if err := s.root.MkdirAll(path.Dir(rel), 0o755); err != nil {
			return nil, "", s.parentsError(p, err)
		}
	}
	dir, err = s.root.OpenRoot(path.Dir(rel))
	if err != nil {
		return nil, "", s.fsError("write", p, err)
	}
	if fi, err := dir.Lstat(path.Base(rel)); err == nil && fi.IsDir() {
		dir.Close()
		return nil, "", fmt.Errorf("write %q: is a directory: %w", p, errdefs.ErrInvalidArgument)
	}
	return dir, rel, nil
}

// parentsError reports a failed MkdirAll of a written file's parents. os.Root says a file
// in the way "exists"; to the caller, whose file does not, a parent is not a directory.
func (s *Service) parentsError(p string, err error) error {
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("write %q: a parent is not a directory: %w", p, errdefs.ErrFailedPrecondition)
	}
	return s.fsError("write", p, err)
}

// writeInto streams the data into a temp file in dir and renames it into place at rel.
func (s *Service) writeInto(stream writeStream, first *agentv1.WriteRequest, dir *os.Root, rel string, mode fs.FileMode) (*agentv1.FileInfo, error) {
	p := first.GetPath()
	tmp, err := createTemp(dir)
	if err != nil {
		return nil, s.fsError("write", p, err)
	}
	defer tmp.discard()
	if err := s.copyStream(stream, first.GetData(), tmp.f, p); err != nil {
		return nil, err
	}
	fi, err := tmp.commit(path.Base(rel), mode)
	if err != nil {
		return nil, s.fsError("write", p, err)
	}
	return infoOf(rel, fi, ""), nil
}

// copyStream writes data and then every later message's data to f, refusing to grow past
// the write limit.
func (s *Service) copyStream(stream writeStream, data []byte, f *os.File, p string) error {
	var total int64
	for {
		total += int64(len(data))
		if total > s.maxWrite {
			return fmt.Errorf("write %q: larger than %d bytes: %w", p, s.maxWrite, errdefs.ErrLimitExceeded)
		}
		if _, err := f.Write(data); err != nil {
			return s.fsError("write", p, err)
		}
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		data = msg.GetData()
	}
}

// tempFile is a Write in progress: discarded unless committed.
type tempFile struct {
	dir       *os.Root
	name      string
	f         *os.File
	committed bool
}

// createTemp creates an empty, private temp file in dir. O_EXCL (with os.Root's
// O_NOFOLLOW) refuses a name the sandbox planted first.
func createTemp(dir *os.Root) (*tempFile, error) {
	var b [12]byte
	rand.Read(b[:])
	name := tempPrefix + hex.EncodeToString(b[:])
	f, err := dir.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	return &tempFile{dir: dir, name: name, f: f}, nil
}

// commit sets the final mode on the descriptor (exactly, whatever the umask), flushes, and
// renames the file over base: readers see the old file or the new one, never a part.
func (t *tempFile) commit(base string, mode fs.FileMode) (fs.FileInfo, error) {
	if err := t.f.Chmod(mode); err != nil {
		return nil, err
	}
	if err := t.f.Sync(); err != nil {
		return nil, err
	}
	fi, err := t.f.Stat()
	if err != nil {
		return nil, err
	}
	if err := t.f.Close(); err != nil {
		return nil, err
	}
	if err := t.dir.Rename(t.name, base); err != nil {
		return nil, err
	}
	t.committed = true
	return fi, nil
}

// discard removes the temp file unless it was committed; it runs on every way out of a
// Write, so a failed or cancelled stream leaves nothing behind.
func (t *tempFile) discard() {
	if t.committed {
		return
	}
	t.f.Close()
	t.dir.Remove(t.name)
}
