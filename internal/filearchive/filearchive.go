// Package filearchive copies file trees in and out as tar streams: a tree of a Source is
// written as a tar archive, and a tar archive is extracted into a Sink. The server's
// sources and sinks are a sandbox's file API (so that every file goes through its policy,
// its capability checks and its history); the CLI's are a local directory.
//
// Threat model: an archive being extracted is untrusted bytes. Extract refuses an entry
// whose name is absolute or climbs with "..", a symlink whose target leads outside the
// workspace it is extracted into, a hard link, and any device, pipe or other special
// file, each with an error that names the entry. It sets only permission bits (never
// set-id). What a name leads to once on disk (a symlink already there) is the sink's to
// check: the agent's file API and os.Root both refuse to leave their root.
package filearchive

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Type is what an entry is.
type Type int

const (
	File Type = iota + 1
	Dir
	Symlink
)

// Entry is one file, directory or symlink of a tree.
type Entry struct {
	// Path is where the entry is in its source (slash-separated, relative to the source's
	// root). Name is its name in the archive.
	Path, Name string
	Type       Type
	Size       int64
	// Mode is the permission bits.
	Mode    fs.FileMode
	ModTime time.Time
	// Link is a symlink's target, as stored.
	Link string
}

// Source is a tree to read. Paths are slash-separated and relative to its root.
type Source interface {
	// Stat describes p, without following a final symlink.
	Stat(ctx context.Context, p string) (Entry, error)
	// ReadDir lists the entries directly in directory p.
	ReadDir(ctx context.Context, p string) ([]Entry, error)
	// Open reads file e.
	Open(ctx context.Context, e Entry) (io.ReadCloser, error)
}

// Walk lists the tree at p in src, p first and every directory before what it holds.
// Archive names start with name (the tree's own name in the archive).
func Walk(ctx context.Context, src Source, p, name string) ([]Entry, error) {
	root, err := src.Stat(ctx, p)
	if err != nil {
		return nil, err
	}
	root.Path, root.Name = p, name
	out := []Entry{root}
	for i := 0; i < len(out); i++ {
		if out[i].Type != Dir {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		children, err := src.ReadDir(ctx, out[i].Path)
		if err != nil {
			return nil, err
		}
		for _, c := range children {
			c.Name = out[i].Name + "/" + path.Base(c.Path)
			out = append(out, c)
		}
	}
	return out, nil
}

// Write writes entries (from Walk) as a tar archive to w, reading files from src. A file
// whose size changed since it was listed is an error, not a corrupt archive.
func Write(ctx context.Context, w io.Writer, src Source, entries []Entry) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		if err := writeEntry(ctx, tw, src, e); err != nil {
			return err
		}
	}
	return tw.Close()
}

func writeEntry(ctx context.Context, tw *tar.Writer, src Source, e Entry) error {
	hdr := &tar.Header{Name: e.Name, Mode: int64(e.Mode.Perm()), ModTime: e.ModTime.Truncate(time.Second)}
	switch e.Type {
	case Dir:
		hdr.Typeflag, hdr.Name = tar.TypeDir, e.Name+"/"
	case Symlink:
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.Link
	case File:
		hdr.Typeflag, hdr.Size = tar.TypeReg, e.Size
	default:
		return nil // special files are not copied
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("archive %s: %w", e.Path, err)
	}
	if e.Type != File {
		return nil
	}
	rc, err := src.Open(ctx, e)
	if err != nil {
		return err
	}
	defer rc.Close()
	n, err := io.Copy(tw, io.LimitReader(rc, e.Size))
	if err != nil {
		return fmt.Errorf("archive %s: %w", e.Path, err)
	}
	if n != e.Size {
		return fmt.Errorf("archive %s: the file shrank from %d to %d bytes while it was copied: %w", e.Path, e.Size, n, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// Sink is a tree to write. Paths are slash-separated and relative to the root the
// archive is extracted into.
type Sink interface {
	Mkdir(ctx context.Context, p string, mode fs.FileMode) error
	// WriteFile makes file p of size bytes from r, replacing what is there.
	WriteFile(ctx context.Context, p string, mode fs.FileMode, size int64, r io.Reader) error
	// Symlink makes a symlink p to target; ErrSkip when the sink cannot make symlinks.
	Symlink(ctx context.Context, p, target string) error
}

// ErrSkip is a sink's answer for an entry it does not make; Extract reports it skipped.
var ErrSkip = errors.New("skipped")

// Result is what an extraction made.
type Result struct {
	Files, Dirs int
	Bytes       int64
	// Skipped names the entries the sink did not make.
	Skipped []string
}

// Extract reads a tar archive from r and makes its entries in dst. base is where dst's
// root is in the workspace the archive must stay inside ("." for the workspace itself):
// a symlink may point anywhere in the workspace, not above it. The first bad entry ends
// the extraction with an errdefs.ErrInvalidArgument that names it; entries before it
// are kept.
func Extract(ctx context.Context, r io.Reader, dst Sink, base string) (Result, error) {
	var res Result
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return res, nil
		}
		if err != nil {
			return res, fmt.Errorf("archive after %d entries: %v: %w", res.Files+res.Dirs+len(res.Skipped), err, errdefs.ErrInvalidArgument)
		}
		e, err := Check(hdr, base)
		if err != nil {
			return res, err
		}
		if err := extractEntry(ctx, dst, e, tr, &res); err != nil {
			return res, err
		}
	}
}

func extractEntry(ctx context.Context, dst Sink, e Entry, tr io.Reader, res *Result) error {
	var err error
	switch e.Type {
	case 0:
		return nil // the root itself, or a header that carries nothing to make
	case Dir:
		if err = dst.Mkdir(ctx, e.Name, e.Mode); err == nil {
			res.Dirs++
		}
	case File:
		if err = dst.WriteFile(ctx, e.Name, e.Mode, e.Size, tr); err == nil {
			res.Files++
			res.Bytes += e.Size
		}
	case Symlink:
		err = dst.Symlink(ctx, e.Name, e.Link)
	}
	if errors.Is(err, ErrSkip) {
		res.Skipped = append(res.Skipped, e.Name)
		return nil
	}
	return err
}

// Check validates one header of an untrusted archive extracted at base and returns the
// entry it makes (Type 0: nothing to make). Its errors name the entry.
func Check(hdr *tar.Header, base string) (Entry, error) {
	name, err := checkName(hdr.Name)
	if err != nil {
		return Entry{}, err
	}
	e := Entry{Name: name, Path: name, Mode: fs.FileMode(hdr.Mode).Perm(), ModTime: hdr.ModTime}
	bad := func(why string) (Entry, error) {
		return Entry{}, fmt.Errorf("archive entry %q: %s: %w", hdr.Name, why, errdefs.ErrInvalidArgument)
	}
	// A sparse file's holes are bytes the archive does not carry: a few bytes of it could
	// stand for terabytes of zeros.
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return bad("sparse files are not supported")
		}
	}
	switch hdr.Typeflag {
	case tar.TypeReg: // the reader turns the old TypeRegA into TypeReg
		if name == "." {
			return bad("a file cannot be the archive's root")
		}
		e.Type, e.Size = File, hdr.Size
	case tar.TypeDir:
		if name != "." {
			e.Type = Dir
		}
	case tar.TypeSymlink:
		if name == "." {
			return bad("a symlink cannot be the archive's root")
		}
		if err := checkLink(hdr.Linkname, base, name); err != nil {
			return bad(err.Error())
		}
		e.Type, e.Link = Symlink, hdr.Linkname
	case tar.TypeXGlobalHeader:
	case tar.TypeLink:
		return bad("hard links are not supported; archive the file itself")
	case tar.TypeChar, tar.TypeBlock:
		return bad("device files are refused")
	case tar.TypeFifo:
		return bad("named pipes are refused")
	default:
		return bad(fmt.Sprintf("entry type %q is not supported; want a file, a directory or a symlink", hdr.Typeflag))
	}
	return e, nil
}

// checkName cleans an archive name ("./a/b/" is "a/b") and refuses one that is
// absolute, climbs with "..", or holds bytes no path may have.
func checkName(raw string) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("archive entry %q: %s: %w", raw, why, errdefs.ErrInvalidArgument)
	}
	switch {
	case raw == "":
		return bad("empty name")
	case strings.IndexByte(raw, 0) >= 0:
		return bad("name contains a NUL byte")
	case strings.HasPrefix(raw, "/"):
		return bad("absolute path; names must be relative to the directory extracted into")
	case strings.Contains(raw, `\`):
		return bad(`name contains a backslash; use "/" between names`)
	}
	for _, part := range strings.Split(raw, "/") {
		if part == ".." {
			return bad(`".." leads outside the directory extracted into`)
		}
	}
	return path.Clean(raw), nil
}

// checkLink refuses a symlink target that is absolute or leads above the workspace,
// for a link at name in the directory base of the workspace.
func checkLink(target, base, name string) error {
	switch {
	case target == "":
		return errors.New("symlink with an empty target")
	case strings.IndexByte(target, 0) >= 0:
		return errors.New("symlink target contains a NUL byte")
	case strings.HasPrefix(target, "/"):
		return fmt.Errorf("symlink to %q: an absolute target escapes the workspace", target)
	}
	at := path.Join(base, path.Dir(name), target)
	if at == ".." || strings.HasPrefix(at, "../") {
		return fmt.Errorf("symlink to %q escapes the workspace", target)
	}
	return nil
}

// Rename is sink s with the first name of every entry's path replaced by name: an
// archive of a tree extracted under a name of the caller's choosing.
func Rename(s Sink, name string) Sink { return renamed{s, name} }

type renamed struct {
	Sink
	name string
}

func (r renamed) rename(p string) string {
	if _, rest, ok := strings.Cut(p, "/"); ok {
		return r.name + "/" + rest
	}
	return r.name
}

func (r renamed) Mkdir(ctx context.Context, p string, mode fs.FileMode) error {
	return r.Sink.Mkdir(ctx, r.rename(p), mode)
}

func (r renamed) WriteFile(ctx context.Context, p string, mode fs.FileMode, size int64, rd io.Reader) error {
	return r.Sink.WriteFile(ctx, r.rename(p), mode, size, rd)
}

func (r renamed) Symlink(ctx context.Context, p, target string) error {
	return r.Sink.Symlink(ctx, r.rename(p), target)
}
