package paddock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/filearchive"
)

// Paths name the sandbox's workspace: "src/a.go", "/src/a.go" and "/workspace/src/a.go"
// are the same file, and no path (nor a symlink on the way) leads outside it. The
// sandbox's policy decides each operation, and each change is recorded in its history.

// ListFiles lists directory dir ("" or "." for the workspace).
func (s *Sandbox) ListFiles(ctx context.Context, dir string) ([]FileInfo, error) {
	if dir == "" {
		dir = "."
	}
	var list api.FileList
	err := s.c.do(ctx, "GET", s.path("files", "list")+"?"+url.Values{"path": {dir}}.Encode(), nil, &list, http.StatusOK)
	return list.Entries, err
}

// ReadFile streams file p; close the reader when done.
func (s *Sandbox) ReadFile(ctx context.Context, p string) (io.ReadCloser, error) {
	resp, err := s.c.raw(ctx, "GET", s.path("files", "content")+"?"+url.Values{"path": {p}}.Encode(), nil, "")
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// WriteFile makes file p (and its missing parents) from r, streamed, replacing what is
// there; the file appears whole or not at all. mode 0 is 0644.
func (s *Sandbox) WriteFile(ctx context.Context, p string, r io.Reader, mode fs.FileMode) (FileInfo, error) {
	q := url.Values{"path": {p}}
	if mode != 0 {
		q.Set("mode", strconv.FormatUint(uint64(mode.Perm()), 8))
	}
	var fi FileInfo
	resp, err := s.c.raw(ctx, "PUT", s.path("files", "content")+"?"+q.Encode(), r, "application/octet-stream")
	if err != nil {
		return fi, err
	}
	err = decodeRaw(resp, &fi, "write "+p)
	return fi, err
}

// Mkdir makes directory p; with parents, also the missing parents, accepting an existing
// directory (mkdir -p). mode 0 is 0755.
func (s *Sandbox) Mkdir(ctx context.Context, p string, parents bool, mode fs.FileMode) (FileInfo, error) {
	req := api.FileMkdirRequest{Path: p, Parents: parents}
	if mode != 0 {
		bits := uint64(mode.Perm())
		if mode&fs.ModeSticky != 0 {
			bits |= 0o1000
		}
		req.Mode = strconv.FormatUint(bits, 8)
	}
	return s.MkdirRequest(ctx, req)
}

// MkdirRequest makes a directory from the full request (an octal mode string).
func (s *Sandbox) MkdirRequest(ctx context.Context, req FileMkdirRequest) (FileInfo, error) {
	var fi FileInfo
	err := s.c.do(ctx, "POST", s.path("files", "mkdir"), req, &fi, http.StatusOK)
	return fi, err
}

// Move renames from to to and describes it at its new path. Without overwrite, something
// already at to is ErrAlreadyExists.
func (s *Sandbox) Move(ctx context.Context, from, to string, overwrite bool) (FileInfo, error) {
	var fi FileInfo
	err := s.c.do(ctx, "POST", s.path("files", "move"), api.FileMoveRequest{From: from, To: to, Overwrite: overwrite}, &fi, http.StatusOK)
	return fi, err
}

// Remove deletes a file or symlink (never its target); a directory with what it holds
// needs recursive.
func (s *Sandbox) Remove(ctx context.Context, p string, recursive bool) error {
	q := url.Values{"path": {p}, "recursive": {strconv.FormatBool(recursive)}}
	return s.c.do(ctx, "DELETE", s.path("files", "content")+"?"+q.Encode(), nil, nil, http.StatusNoContent)
}

// GetArchive streams the tree at p ("" for the workspace) as a tar archive whose entries
// start with the tree's own name ("workspace" for the workspace). A failure after the
// first byte cuts the connection, so reading it to the end either succeeds or fails:
// a cut archive is never taken for a whole one. Close the reader when done.
func (s *Sandbox) GetArchive(ctx context.Context, p string) (io.ReadCloser, error) {
	resp, err := s.c.raw(ctx, "GET", s.path("files", "archive")+"?"+url.Values{"path": {p}}.Encode(), nil, "")
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// PutArchive extracts the tar archive r into directory dir ("" for the workspace),
// made with its parents when missing, streamed: nothing bounds it but the policy and the
// sandbox's disk (a full disk is ErrLimitExceeded with Limit LimitDisk). The first bad
// or refused entry ends it with an error naming the entry; the entries before it stay.
// Symlinks are skipped and listed in the result.
func (s *Sandbox) PutArchive(ctx context.Context, dir string, r io.Reader) (ArchiveResult, error) {
	var res ArchiveResult
	resp, err := s.c.raw(ctx, "PUT", s.path("files", "archive")+"?"+url.Values{"path": {dir}}.Encode(), r, api.ContentTypeTar)
	if err != nil {
		return res, err
	}
	err = decodeRaw(resp, &res, "archive into "+dir)
	return res, err
}

// CopyIn copies the local file or directory local (recursively) to dst in the sandbox,
// streamed as a tar archive. local becomes dst (as cp -r to a new name does); a dst
// ending in "/" is a directory to copy into, as dst/<local's name>.
func (s *Sandbox) CopyIn(ctx context.Context, local, dst string) (ArchiveResult, error) {
	local = filepath.Clean(local)
	dir, name := path.Split(dst)
	if name == "" || name == "." {
		dir, name = dst, filepath.Base(local)
	}
	if name == "/" || name == ".." {
		return ArchiveResult{}, fmt.Errorf("copy to %q: name a file or a directory: %w", dst, ErrInvalidArgument)
	}
	src, err := filearchive.OpenLocal(filepath.Dir(local))
	if err != nil {
		return ArchiveResult{}, err
	}
	defer src.Close()
	entries, err := filearchive.Walk(ctx, src, filepath.Base(local), name)
	if err != nil {
		return ArchiveResult{}, err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(filearchive.Write(ctx, pw, src, entries)) }()
	res, err := s.PutArchive(ctx, dir, pr)
	pr.CloseWithError(errors.New("the upload ended"))
	return res, err
}

// CopyOut copies the sandbox's file or directory src (recursively) to local, streamed
// as a tar archive. src becomes local, unless local is an existing directory: then it is
// copied into it, as local/<src's name>. The archive is checked as it is extracted:
// nothing of it lands outside local.
func (s *Sandbox) CopyOut(ctx context.Context, src, local string) (ArchiveResult, error) {
	res := ArchiveResult{Path: local}
	local = filepath.Clean(local)
	dir, name := filepath.Dir(local), filepath.Base(local)
	if fi, err := os.Stat(local); err == nil && fi.IsDir() {
		dir, name = local, ""
	}
	rc, err := s.GetArchive(ctx, src)
	if err != nil {
		return res, err
	}
	defer rc.Close()
	dst, err := filearchive.OpenLocal(dir)
	if err != nil {
		return res, err
	}
	defer dst.Close()
	var sink filearchive.Sink = dst
	if name != "" {
		sink = filearchive.Rename(dst, name)
	}
	made, err := filearchive.Extract(ctx, rc, sink, ".")
	res.Files, res.Dirs, res.Bytes, res.Skipped = made.Files, made.Dirs, made.Bytes, made.Skipped
	return res, err
}
