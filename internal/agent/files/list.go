package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/paddockhq/paddock/internal/capability"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
	"github.com/paddockhq/paddock/internal/wire/agentv1"
)

func (s *Service) stat(p string) (*agentv1.FileInfo, error) {
	rel, err := wire.ResolvePath(p)
	if err != nil {
		return nil, err
	}
	info, err := describe(s.root, rel, rel)
	if err != nil {
		return nil, s.fsError("stat", p, err)
	}
	return info, nil
}

// describe lstats name in r and reports it at rel, with the stored target of a symlink.
func describe(r *os.Root, name, rel string) (*agentv1.FileInfo, error) {
	fi, err := r.Lstat(name)
	if err != nil {
		return nil, err
	}
	var target string
	if fi.Mode()&fs.ModeSymlink != 0 {
		if target, err = r.Readlink(name); err != nil {
			return nil, err
		}
	}
	return infoOf(rel, fi, target), nil
}

func (s *Service) list(ctx context.Context, req *agentv1.ListFilesRequest) (*agentv1.ListFilesResponse, error) {
	p := req.GetPath()
	dir, rel, err := s.openDirRoot(p)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	if g := grantOf(req); g.Set() {
		// The entries are under the directory, and symlinks among them are not followed:
		// a grant of the directory covers them.
		if _, err := s.allowIn(ctx, g, "list", p, capability.Read, dir, ".", 0); err != nil {
			return nil, err
		}
	}
	l := &lister{ctx: ctx, max: s.maxList}
	if err := l.walk(dir, rel, min(max(req.GetDepth(), 1), MaxListDepth)); err != nil {
		return nil, s.fsError("list", p, err)
	}
	slices.SortFunc(l.entries, func(a, b *agentv1.FileInfo) int { return strings.Compare(a.Path, b.Path) })
	return &agentv1.ListFilesResponse{Entries: l.entries}, nil
}

// openDirRoot opens the directory at the caller's path p as a root of its own, following
// the components of p only while they stay inside the workspace.
func (s *Service) openDirRoot(p string) (*os.Root, string, error) {
	rel, err := wire.ResolvePath(p)
	if err != nil {
		return nil, "", err
	}
	fi, err := s.root.Stat(rel)
	if err != nil {
		return nil, "", s.fsError("list", p, err)
	}
	if !fi.IsDir() {
		return nil, "", fmt.Errorf("list %q: not a directory: %w", p, errdefs.ErrInvalidArgument)
	}
	dir, err := s.root.OpenRoot(rel)
	if err != nil {
		return nil, "", s.fsError("list", p, err)
	}
	return dir, rel, nil
}

// lister collects a List's entries. Each directory is walked through a root of its own
// opened from its parent's, so even an entry swapped for a symlink mid-walk cannot lead
// the walk out of the subtree it was in, and the depth bound ends any cycle.
type lister struct {
	ctx     context.Context
	max     int
	entries []*agentv1.FileInfo
}

func (l *lister) walk(dir *os.Root, rel string, depth uint32) error {
	names, err := l.names(dir)
	if err != nil {
		return err
	}
	for _, name := range names {
		info, err := describe(dir, name, path.Join(rel, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since we read the directory
		}
		if err != nil {
			return err
		}
		if err := l.add(info); err != nil {
			return err
		}
		if info.Type == agentv1.FileType_FILE_TYPE_DIR && depth > 1 {
			if err := l.descend(dir, name, info.Path, depth-1); err != nil {
				return err
			}
		}
	}
	return nil
}

func (l *lister) descend(dir *os.Root, name, rel string, depth uint32) error {
	sub, err := dir.OpenRoot(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer sub.Close()
	return l.walk(sub, rel, depth)
}

func (l *lister) add(info *agentv1.FileInfo) error {
	if len(l.entries) >= l.max {
		return fmt.Errorf("more than %d entries (list a smaller tree or depth): %w", l.max, errdefs.ErrLimitExceeded)
	}
	l.entries = append(l.entries, info)
	return nil
}

// names reads dir's entry names in batches, stopping as soon as the listing could no
// longer fit, so a directory of millions of entries costs little. Names only: os's
// DirEntry.Info would lstat by host path string, which a swap could redirect.
func (l *lister) names(dir *os.Root) ([]string, error) {
	f, err := dir.Open(".")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var names []string
	for {
		if err := l.ctx.Err(); err != nil {
			return nil, err
		}
		batch, err := f.Readdirnames(256)
		names = append(names, batch...)
		if len(l.entries)+len(names) > l.max {
			return nil, fmt.Errorf("more than %d entries: %w", l.max, errdefs.ErrLimitExceeded)
		}
		if errors.Is(err, io.EOF) {
			return names, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
