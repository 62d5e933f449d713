package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/capability"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/filearchive"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/policy"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// The files archive copies a tree in or out as a tar stream. Every file, directory and
// listing goes through the agent's file API one by one, so the policy's file rules, a
// capability's bounds and the workspace's history apply as they do to single files, and
// nothing bounds an upload but those rules and the sandbox's disk.

// agentTree is a sandbox's workspace as a filearchive Source and Sink.
type agentTree struct {
	s    *Server
	r    *http.Request
	c    fleet.Caller
	id   string
	fc   pb.FilesClient
	hc   pb.HistoryClient
	in   inForce
	base string // where the Sink's root is, relative to the workspace
	disk runner.Size
}

func (s *Server) agentTree(r *http.Request, c fleet.Caller, base string) (*agentTree, error) {
	id := r.PathValue("id")
	conn, err := s.fleet.Conn(r.Context(), c, id)
	if err != nil {
		return nil, err
	}
	in, err := s.policyOf(r.Context(), c, id)
	if err != nil {
		return nil, err
	}
	t := &agentTree{s: s, r: r, c: c, id: id, fc: pb.NewFilesClient(conn), hc: pb.NewHistoryClient(conn), in: in, base: base}
	if rec, err := s.fleet.Get(r.Context(), c, id); err == nil {
		t.disk = runner.Size(rec.DiskBytes)
	}
	return t, nil
}

// decide decides op on workspace path p for size bytes by the policy, and checks the
// request's capability for action on it; it returns the capability for the agent.
func (t *agentTree) decide(ctx context.Context, op policy.Op, action capability.Action, p string, size int64) (string, error) {
	if err := t.s.decideFile(ctx, t.c, t.id, t.in, op, p, size); err != nil {
		return "", err
	}
	return t.s.capabilityFile(ctx, p, action, size)
}

func (t *agentTree) agentErr(op, p string, err error) error {
	err = t.s.fromAgent(t.r, t.c, "sandbox.file_denied", map[string]any{"op": op, "path": p}, err)
	if errors.Is(err, errdefs.ErrLimitExceeded) && strings.Contains(err.Error(), "no space left") {
		value := ""
		if t.disk > 0 {
			value = " (" + t.disk.String() + ")"
		}
		return &api.LimitError{Limit: api.LimitDisk, Err: fmt.Errorf("%s %s: the sandbox's disk limit%s was reached: %w", op, p, value, errdefs.ErrLimitExceeded)}
	}
	return err // the agent's message names the operation and the path
}

func entryOf(e *pb.FileInfo) filearchive.Entry {
	out := filearchive.Entry{Path: e.Path, Size: int64(e.Size), Mode: fs.FileMode(e.Mode).Perm(), ModTime: time.Unix(0, e.MtimeUnixNano), Link: e.LinkTarget}
	switch e.Type {
	case pb.FileType_FILE_TYPE_FILE:
		out.Type = filearchive.File
	case pb.FileType_FILE_TYPE_DIR:
		out.Type, out.Size = filearchive.Dir, 0
	case pb.FileType_FILE_TYPE_SYMLINK:
		out.Type, out.Size = filearchive.Symlink, 0
	}
	return out
}

func (t *agentTree) Stat(ctx context.Context, p string) (filearchive.Entry, error) {
	if _, err := t.decide(ctx, policy.Read, capability.Read, p, 0); err != nil {
		return filearchive.Entry{}, err
	}
	info, err := t.fc.Stat(ctx, &pb.StatRequest{Path: p})
	if err != nil {
		return filearchive.Entry{}, t.agentErr("stat", p, err)
	}
	return entryOf(info), nil
}

func (t *agentTree) ReadDir(ctx context.Context, p string) ([]filearchive.Entry, error) {
	capTok, err := t.decide(ctx, policy.Read, capability.Read, p, 0)
	if err != nil {
		return nil, err
	}
	res, err := t.fc.List(ctx, &pb.ListFilesRequest{Path: p, Depth: 1, Capability: capTok, Policy: t.in.fileRules()})
	if err != nil {
		return nil, t.agentErr("list", p, err)
	}
	out := make([]filearchive.Entry, 0, len(res.Entries))
	for _, e := range res.Entries {
		out = append(out, entryOf(e))
	}
	return out, nil
}

func (t *agentTree) Open(ctx context.Context, e filearchive.Entry) (io.ReadCloser, error) {
	capTok, err := t.decide(ctx, policy.Read, capability.Read, e.Path, e.Size)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := t.fc.Read(ctx, &pb.ReadRequest{Path: e.Path, Capability: capTok, Policy: t.in.fileRules()})
	if err != nil {
		cancel()
		return nil, t.agentErr("read", e.Path, err)
	}
	return &chunkReader{recv: func() ([]byte, error) {
		chunk, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, io.EOF
			}
			return nil, t.agentErr("read", e.Path, err)
		}
		return chunk.Data, nil
	}, cancel: cancel}, nil
}

// chunkReader reads a stream of chunks.
type chunkReader struct {
	recv   func() ([]byte, error)
	buf    []byte
	cancel context.CancelFunc
}

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.buf) == 0 {
		data, err := c.recv()
		if err != nil {
			return 0, err
		}
		c.buf = data
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

func (c *chunkReader) Close() error { c.cancel(); return nil }

func (t *agentTree) Mkdir(ctx context.Context, p string, mode fs.FileMode) error {
	full := path.Join(t.base, p)
	capTok, err := t.decide(ctx, policy.Mkdir, capability.Write, full, 0)
	if err != nil {
		return err
	}
	_, err = t.fc.Mkdir(ctx, &pb.MkdirRequest{Path: full, Parents: true, Mode: uint32(mode.Perm()), Capability: capTok, Policy: t.in.fileRules()})
	if err != nil {
		return t.agentErr("mkdir", full, err)
	}
	return nil
}

func (t *agentTree) WriteFile(ctx context.Context, p string, mode fs.FileMode, size int64, r io.Reader) error {
	full := path.Join(t.base, p)
	capTok, err := t.decide(ctx, policy.Write, capability.Write, full, size)
	if err != nil {
		return err
	}
	if mode = mode.Perm(); mode == 0 {
		mode = 0o644
	}
	// An upload that breaks off cancels the write, and the agent keeps no partial file.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := t.fc.Write(ctx)
	if err != nil {
		return t.agentErr("write", full, err)
	}
	msg := &pb.WriteRequest{Path: full, Mode: uint32(mode), MakeParents: true, Capability: capTok, Policy: t.in.fileRules()}
	buf := make([]byte, 256<<10)
	lr := io.LimitReader(r, size)
	var total int64
	for {
		n, rerr := io.ReadFull(lr, buf)
		total += int64(n)
		msg.Data = buf[:n]
		if n > 0 || msg.Path != "" {
			if err := stream.Send(msg); err != nil {
				break // the agent's answer below says why
			}
		}
		msg = &pb.WriteRequest{}
		if (errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF)) && total == size {
			break
		}
		if rerr != nil {
			cancel()
			return fmt.Errorf("archive entry %q: reading the upload: %v: %w", p, rerr, errdefs.ErrInvalidArgument)
		}
	}
	if _, err := stream.CloseAndRecv(); err != nil {
		return t.agentErr("write", full, err)
	}
	return nil
}

// Symlink is skipped: the agent's file API makes no symlinks.
func (t *agentTree) Symlink(context.Context, string, string) error { return filearchive.ErrSkip }

// extract makes directory root and extracts the archive in body into it.
func (t *agentTree) extract(ctx context.Context, body io.Reader, root string) (filearchive.Result, error) {
	if root != "." {
		if err := t.Mkdir(ctx, ".", 0); err != nil {
			return filearchive.Result{}, err
		}
	}
	return filearchive.Extract(ctx, body, t, root)
}

// begin opens a transaction around an upload, so that the workspace's history records
// it as one checkpoint (message) rather than one per file; the function it returns
// commits it, also after a failure, so that what was written can be undone in one step.
// A transaction the user holds open already takes the upload in; a sandbox whose history
// cannot begin one records a checkpoint per file, as single writes do.
func (t *agentTree) begin(ctx context.Context, message string) (commit func()) {
	if _, err := t.hc.Begin(ctx, &pb.BeginRequest{Message: message}); err != nil {
		t.s.log.Debug("files archive: no transaction of its own", "sandbox", t.id, "err", err)
		return func() {}
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if _, err := t.hc.Commit(ctx, &pb.CommitRequest{}); err != nil {
			t.s.log.Warn("files archive: commit", "sandbox", t.id, "err", err)
		}
	}
}

// archiveRoot is the workspace path of ?path= (the workspace when absent).
func archiveRoot(r *http.Request) (string, error) {
	p := r.URL.Query().Get("path")
	if p == "" {
		p = "."
	}
	return wire.ResolvePath(p)
}

// getArchive answers the tree at ?path= as a tar archive whose entries start with the
// tree's own name ("workspace" for the whole workspace). Everything is listed and
// decided before the first byte is sent, so that a missing path or a refused file is an
// error response; a failure after that aborts the connection, so that a client never
// takes a cut archive for a whole one.
func (s *Server) getArchive(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	root, err := archiveRoot(r)
	if err != nil {
		return err
	}
	t, err := s.agentTree(r, c, root)
	if err != nil {
		return err
	}
	name := path.Base(root)
	if root == "." {
		name = "workspace"
	}
	entries, err := filearchive.Walk(r.Context(), t, root, name)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if _, err := t.decide(r.Context(), policy.Read, capability.Read, e.Path, e.Size); err != nil {
			return fmt.Errorf("archive of %s: %w", root, err)
		}
	}
	h := w.Header()
	h.Set("Content-Type", api.ContentTypeTar)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name + ".tar"}))
	w.WriteHeader(http.StatusOK)
	if err := filearchive.Write(r.Context(), w, t, entries); err != nil {
		s.log.Warn("files archive: cut short", "sandbox", t.id, "path", root, "err", err)
		panic(http.ErrAbortHandler)
	}
	return errResponded
}

// putArchive extracts the tar archive in the body into the directory ?path= (made with
// its parents when missing). Entries are checked as they come (filearchive.Check); the
// first bad one, a refused one or a full disk ends the upload with an error naming it,
// and what came before it stays.
func (s *Server) putArchive(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != api.ContentTypeTar && mt != "application/octet-stream") {
			return fmt.Errorf("Content-Type %q: want %s: %w", ct, api.ContentTypeTar, api.ErrUnsupportedMedia)
		}
	}
	root, err := archiveRoot(r)
	if err != nil {
		return err
	}
	t, err := s.agentTree(r, c, root)
	if err != nil {
		return err
	}
	commit := t.begin(r.Context(), "copy into "+root)
	res, err := t.extract(r.Context(), r.Body, root)
	commit()
	detail := map[string]any{"sandbox": t.id, "path": root, "files": res.Files, "dirs": res.Dirs, "bytes": res.Bytes, "policy": t.in.source}
	if err != nil {
		detail["error"] = err.Error()
	}
	s.event(r.Context(), c.UserID, "sandbox.files_archive_put", detail)
	if err != nil {
		return err
	}
	if res.Skipped == nil {
		res.Skipped = []string{}
	}
	api.WriteJSON(w, http.StatusOK, api.ArchiveResult{Path: root, Files: res.Files, Dirs: res.Dirs, Bytes: res.Bytes, Skipped: res.Skipped})
	return nil
}
