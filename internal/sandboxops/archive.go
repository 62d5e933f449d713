package sandboxops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/capability"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/filearchive"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/policy"
	"github.com/paddockhq/paddock/internal/sandbox/agentclient"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// The files archive copies a tree in or out as a tar stream. Every file, directory and
// listing goes through the agent's file API one by one, so the policy's file rules, a
// capability's bounds and the workspace's history apply as they do to single files, and
// nothing bounds an upload but those rules and the sandbox's disk.

// agentTree is a sandbox's workspace as a filearchive Source and Sink.
type agentTree struct {
	o     *Ops
	c     fleet.Caller
	id    string
	agent *agentclient.Client
	in    InForce
	base  string // where the Sink's root is, relative to the workspace
	disk  wire.Size
}

func (o *Ops) agentTree(ctx context.Context, c fleet.Caller, id, base string) (*agentTree, error) {
	agent, err := o.fleet.Agent(ctx, c, id)
	if err != nil {
		return nil, err
	}
	in, err := o.policyOf(ctx, c, id)
	if err != nil {
		return nil, err
	}
	t := &agentTree{o: o, c: c, id: id, agent: agent, in: in, base: base}
	if rec, err := o.fleet.Get(ctx, c, id); err == nil {
		t.disk = wire.Size(rec.DiskBytes)
	}
	return t, nil
}

// decide decides op on workspace path p for size bytes by the policy, and checks the
// request's capability for action on it; it returns the capability for the agent.
func (t *agentTree) decide(ctx context.Context, op policy.Op, action capability.Action, p string, size int64) (string, error) {
	if err := t.o.decideFile(ctx, t.c, t.id, t.in, op, p, size); err != nil {
		return "", err
	}
	return t.o.capabilityFile(ctx, p, action, size)
}

func (t *agentTree) agentErr(ctx context.Context, op, p string, err error) error {
	err = t.o.fileDenied(ctx, t.c, t.id, op, p, err)
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
	info, err := t.agent.Stat(ctx, &pb.StatRequest{Path: p})
	if err != nil {
		return filearchive.Entry{}, t.agentErr(ctx, "stat", p, err)
	}
	return entryOf(info), nil
}

func (t *agentTree) ReadDir(ctx context.Context, p string) ([]filearchive.Entry, error) {
	capTok, err := t.decide(ctx, policy.Read, capability.Read, p, 0)
	if err != nil {
		return nil, err
	}
	res, err := t.agent.List(ctx, &pb.ListFilesRequest{Path: p, Depth: 1, Capability: capTok, Policy: t.in.fileRules()})
	if err != nil {
		return nil, t.agentErr(ctx, "list", p, err)
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
	stream, err := t.agent.Read(ctx, &pb.ReadRequest{Path: e.Path, Capability: capTok, Policy: t.in.fileRules()})
	if err != nil {
		cancel()
		return nil, t.agentErr(ctx, "read", e.Path, err)
	}
	return &chunkReader{recv: func() ([]byte, error) {
		chunk, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, io.EOF
			}
			return nil, t.agentErr(ctx, "read", e.Path, err)
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
	_, err = t.agent.Mkdir(ctx, &pb.MkdirRequest{Path: full, Parents: true, Mode: uint32(mode.Perm()), Capability: capTok, Policy: t.in.fileRules()})
	if err != nil {
		return t.agentErr(ctx, "mkdir", full, err)
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
	stream, err := t.agent.Write(ctx)
	if err != nil {
		return t.agentErr(ctx, "write", full, err)
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
		return t.agentErr(ctx, "write", full, err)
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
	if _, err := t.agent.Begin(ctx, message); err != nil {
		t.o.log.Debug("files archive: no transaction of its own", "sandbox", t.id, "err", err)
		return func() {}
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if _, err := t.agent.Commit(ctx); err != nil {
			t.o.log.Warn("files archive: commit", "sandbox", t.id, "err", err)
		}
	}
}

// Archive is a tree of a sandbox, listed and decided, ready to be written as a tar
// archive.
type Archive struct {
	// Name is the tree's own name, which its entries start with ("workspace" for the
	// whole workspace).
	Name    string
	root    string
	t       *agentTree
	entries []filearchive.Entry
}

// GetArchive lists the tree at p ("" for the workspace) and decides every entry of it
// (policy, capability) before any content moves, so that a missing path or a refused
// file is this call's error.
func (o *Ops) GetArchive(ctx context.Context, c fleet.Caller, id, p string) (*Archive, error) {
	root, err := archiveRoot(p)
	if err != nil {
		return nil, err
	}
	t, err := o.agentTree(ctx, c, id, root)
	if err != nil {
		return nil, err
	}
	name := path.Base(root)
	if root == "." {
		name = "workspace"
	}
	entries, err := filearchive.Walk(ctx, t, root, name)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if _, err := t.decide(ctx, policy.Read, capability.Read, e.Path, e.Size); err != nil {
			return nil, err
		}
	}
	return &Archive{Name: name, root: root, t: t, entries: entries}, nil
}

// Write writes the archive to w. An error leaves w with a cut archive, which the caller
// must not let pass for a whole one.
func (a *Archive) Write(ctx context.Context, w io.Writer) error {
	err := filearchive.Write(ctx, w, a.t, a.entries)
	if err != nil {
		a.t.o.log.Warn("files archive: cut short", "sandbox", a.t.id, "path", a.root, "err", err)
	}
	return err
}

// PutArchive extracts the tar archive body into the directory dir ("" for the
// workspace), made with its parents when missing. Entries are checked as they come
// (filearchive.Check); the first bad one, a refused one or a full disk ends the upload
// with an error naming it, and what came before it stays.
func (o *Ops) PutArchive(ctx context.Context, c fleet.Caller, id, dir string, body io.Reader) (api.ArchiveResult, error) {
	root, err := archiveRoot(dir)
	if err != nil {
		return api.ArchiveResult{}, err
	}
	t, err := o.agentTree(ctx, c, id, root)
	if err != nil {
		return api.ArchiveResult{}, err
	}
	commit := t.begin(ctx, "copy into "+root)
	res, err := t.extract(ctx, body, root)
	commit()
	detail := map[string]any{"sandbox": id, "path": root, "files": res.Files, "dirs": res.Dirs, "bytes": res.Bytes, "policy": t.in.source}
	if err != nil {
		detail["error"] = err.Error()
	}
	o.event(ctx, c.UserID, "sandbox.files_archive_put", detail)
	if err != nil {
		return api.ArchiveResult{}, err
	}
	if res.Skipped == nil {
		res.Skipped = []string{}
	}
	return api.ArchiveResult{Path: root, Files: res.Files, Dirs: res.Dirs, Bytes: res.Bytes, Skipped: res.Skipped}, nil
}

// archiveRoot is the workspace path of p (the workspace when empty).
func archiveRoot(p string) (string, error) {
	if p == "" {
		p = "."
	}
	return wire.ResolvePath(p)
}
