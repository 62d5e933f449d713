package files

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"

	"google.golang.org/grpc"

	"github.com/paddockhq/paddock/internal/capability"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
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
	var g *writeGrant
	if grant := grantOf(first); grant.Set() {
		g = &writeGrant{s: s, ctx: stream.Context(), grant: grant, p: first.GetPath()}
	}
	dir, rel, err := s.writeTarget(first, g)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	return s.writeInto(stream, first, dir, rel, mode, g)
}

// writeTarget opens the directory the file goes into as a root of its own, so the temp file
// and the final rename both happen in the directory we checked, whatever is renamed meanwhile.
// Under a capability token (g) the file's place in that directory is verified before
// anything is written, and before parents are made, where they would be made.
func (s *Service) writeTarget(first *agentv1.WriteRequest, g *writeGrant) (dir *os.Root, rel string, err error) {
	p := first.GetPath()
	if rel, err = wire.ResolvePath(p); err != nil {
		return nil, "", err
	}
	if rel == "." {
		return nil, "", fmt.Errorf("write %q: is the workspace directory: %w", p, errdefs.ErrInvalidArgument)
	}
	if first.GetMakeParents() {
		if g != nil {
			if err := s.allowNew(g.ctx, g.grant, "write", p, capability.Write, rel); err != nil {
				return nil, "", err
			}
		}
		if err := s.root.MkdirAll(path.Dir(rel), 0o755); err != nil {
			return nil, "", s.parentsError("write", p, err)
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
	if g != nil {
		g.dir, g.name = dir, path.Base(rel)
		if err := g.allow(0); err != nil {
			dir.Close()
			return nil, "", err
		}
	}
	return dir, rel, nil
}

// writeGrant is the capability check of a Write that carries a token: verified at the
// first message with size 0, again as soon as the data passes the token's max_size, and
// with the final size just before the file is renamed into place, each time on where
// the directory it goes into is then. A refusal leaves the temp file to be discarded and
// whatever was at the path as it was.
type writeGrant struct {
	s       *Service
	ctx     context.Context
	grant   Grant
	p       string   // the caller's path, for errors
	dir     *os.Root // the directory the file goes into
	name    string
	maxSize int64 // the token's smallest max_size, from the last check; 0 for none
}

// allow verifies the write of size bytes.
func (g *writeGrant) allow(size int64) error {
	maxSize, err := g.s.allowIn(g.ctx, g.grant, "write", g.p, capability.Write, g.dir, g.name, size)
	if err != nil {
		return err
	}
	g.maxSize = maxSize
	return nil
}

// parentsError reports a failed MkdirAll of the parents of what op makes. os.Root says a
// file in the way "exists"; to the caller, whose file does not, a parent is not a directory.
func (s *Service) parentsError(op, p string, err error) error {
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s %q: a parent is not a directory: %w", op, p, errdefs.ErrFailedPrecondition)
	}
	return s.fsError(op, p, err)
}

// writeInto streams the data into a temp file in dir and renames it into place at rel.
func (s *Service) writeInto(stream writeStream, first *agentv1.WriteRequest, dir *os.Root, rel string, mode fs.FileMode, g *writeGrant) (*agentv1.FileInfo, error) {
	p := first.GetPath()
	tmp, err := createTemp(dir)
	if err != nil {
		return nil, s.fsError("write", p, err)
	}
	defer tmp.discard()
	tag := newTagger()
	if err := s.copyStream(stream, first.GetData(), io.MultiWriter(tmp.f, tag), p, g); err != nil {
		return nil, err
	}
	// Synced before the rename unless the file system orders a replacement's data before
	// the rename itself (see renameFirstOn), and the file replaces one.
	syncFirst := true
	if s.renameFirst {
		if old, err := dir.Lstat(path.Base(rel)); err == nil && old.Mode().IsRegular() {
			syncFirst = false
		}
	}
	fi, err := tmp.finish(mode, syncFirst)
	if err != nil {
		return nil, s.fsError("write", p, err)
	}
	if g != nil {
		if err := g.allow(fi.Size()); err != nil {
			return nil, err
		}
	}
	if err := s.commit(dir, tmp, first, rel); err != nil {
		return nil, err
	}
	if err := tmp.close(!syncFirst); err != nil {
		return nil, s.fsError("write", p, fmt.Errorf("the file is in place, but syncing it failed: %w", err))
	}
	info := infoOf(rel, fi, "")
	info.Etag = tagOf(tag)
	return info, nil
}

// commit renames tmp into place at rel. The check of If-Match and the rename are one step
// among the agent's own writes: two saves based on the same read cannot both pass.
func (s *Service) commit(dir *os.Root, tmp *tempFile, first *agentv1.WriteRequest, rel string) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	p := first.GetPath()
	if want := first.GetIfMatch(); want != "" {
		if err := s.checkMatch(dir, path.Base(rel), p, want); err != nil {
			return err
		}
	}
	if s.beforeCommit != nil {
		s.beforeCommit()
	}
	if err := tmp.rename(path.Base(rel)); err != nil {
		return s.fsError("write", p, err)
	}
	return nil
}

// copyStream writes data and then every later message's data to f, refusing to grow past
// the write limit, or past the max_size of the capability token g (nil: none).
func (s *Service) copyStream(stream writeStream, data []byte, f io.Writer, p string, g *writeGrant) error {
	var total int64
	for {
		total += int64(len(data))
		if total > s.maxWrite {
			return fmt.Errorf("write %q: larger than %d bytes: %w", p, s.maxWrite, errdefs.ErrLimitExceeded)
		}
		if g != nil && g.maxSize > 0 && total > g.maxSize {
			if err := g.allow(total); err != nil {
				return err
			}
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

// finish sets the final mode on the descriptor (exactly, whatever the umask), with sync
// flushes the file, and describes it. The file stays open for close.
func (t *tempFile) finish(mode fs.FileMode, sync bool) (fs.FileInfo, error) {
	if err := t.f.Chmod(mode); err != nil {
		return nil, err
	}
	if sync {
		if err := t.f.Sync(); err != nil {
			return nil, err
		}
	}
	return t.f.Stat()
}

// close closes the file renamed into place, with sync flushing it first.
func (t *tempFile) close(sync bool) error {
	var err error
	if sync {
		err = t.f.Sync()
	}
	return errors.Join(err, t.f.Close())
}

// rename puts the finished file in place over base: readers see the old file or the new
// one, never a part.
func (t *tempFile) rename(base string) error {
	if err := t.dir.Rename(t.name, base); err != nil {
		return err
	}
	t.committed = true
	return nil
}

// discard removes the temp file unless it was committed; it runs on every way out of a
// Write, so a failed or cancelled stream leaves nothing behind.
func (t *tempFile) discard() {
	if t.committed {
		return
	}
	t.f.Close()
	_ = t.dir.Remove(t.name) // best effort: the temporary name is ours
}
