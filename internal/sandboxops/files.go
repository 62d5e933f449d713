package sandboxops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/capability"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/policy"
	"github.com/paddockhq/paddock/internal/sandbox/agentclient"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// Files go through the agent's jailed file API: paths are relative to the workspace (a
// leading "/workspace/" or "/" is accepted), and the agent refuses anything that would
// leave it, symlinks included.

// MaxUpload bounds one file written.
const MaxUpload = 1 << 30

// fileOp is what a file operation has settled before it asks the agent.
type fileOp struct {
	agent *agentclient.Client
	// in is the policy in force: its file rules go to the agent, which decides them again
	// where the path really leads.
	in InForce
	// capTok is the request's capability reissued for the agent ("" without one).
	capTok string
}

// prepareFileOp reaches sandbox id (another user's is not found), decides op on the path
// p for size bytes under the policy in force, and checks the request's capability for
// action on it.
func (o *Ops) prepareFileOp(ctx context.Context, c fleet.Caller, id string, op policy.Op, action capability.Action, p string, size int64) (fileOp, error) {
	var f fileOp
	var err error
	if f.agent, err = o.fleet.Agent(ctx, c, id); err != nil {
		return f, err
	}
	if f.in, err = o.policyOf(ctx, c, id); err != nil {
		return f, err
	}
	if err := o.decideFile(ctx, c, id, f.in, op, p, size); err != nil {
		return f, err
	}
	f.capTok, err = o.capabilityFile(ctx, p, action, size)
	return f, err
}

// decideWrite decides a write that has grown to size bytes: by the policy, and by the
// capability the request acts under.
func (o *Ops) decideWrite(ctx context.Context, c fleet.Caller, id string, in InForce, p string, size int64) error {
	if err := o.decideFile(ctx, c, id, in, policy.Write, p, size); err != nil {
		return err
	}
	_, err := o.capabilityFile(ctx, p, capability.Write, size)
	return err
}

// fileDenied records a refusal of the agent's on a file operation.
func (o *Ops) fileDenied(ctx context.Context, c fleet.Caller, id, op, p string, err error) error {
	return o.fromAgent(ctx, c, id, "sandbox.file_denied", map[string]any{"op": op, "path": p}, err)
}

// ListFiles lists the directory p ("" is the workspace).
func (o *Ops) ListFiles(ctx context.Context, c fleet.Caller, id, p string) (api.FileList, error) {
	if p == "" {
		p = "."
	}
	f, err := o.prepareFileOp(ctx, c, id, policy.Read, capability.Read, p, 0)
	if err != nil {
		return api.FileList{}, err
	}
	res, err := f.agent.List(ctx, &pb.ListFilesRequest{Path: p, Capability: f.capTok, Policy: f.in.fileRules()})
	if err != nil {
		return api.FileList{}, fmt.Errorf("list %s: %w", p, o.fileDenied(ctx, c, id, "list", p, err))
	}
	out := api.FileList{Path: p, Entries: []api.FileInfo{}}
	for _, e := range res.Entries {
		out.Entries = append(out.Entries, fileInfo(e))
	}
	return out, nil
}

func fileInfo(e *pb.FileInfo) api.FileInfo {
	return api.FileInfo{
		Name: path.Base(e.Path), Path: e.Path, Size: int64(e.Size), Mode: fmt.Sprintf("%04o", e.Mode),
		IsDir: e.Type == pb.FileType_FILE_TYPE_DIR, ModTime: time.Unix(0, e.MtimeUnixNano).UTC(),
	}
}

// Download is content streamed from a sandbox whose first chunk has arrived: an error
// that comes before any content (a missing file, a refusal) is the operation's, and one
// after it cuts the content short.
type Download struct {
	// ETag is the file's content tag (the agent's, unquoted): a WriteRequest with it in
	// IfMatch writes only over these bytes.
	ETag   string
	first  []byte
	next   func() ([]byte, error)
	done   func(err error)
	closed bool
}

// WriteTo writes the content to w. A stream from the sandbox that breaks off ends the
// content short, and is the error; a w that fails stops it.
func (d *Download) WriteTo(w io.Writer) (int64, error) {
	var n int64
	chunk := d.first
	var err error
	for {
		m, werr := w.Write(chunk)
		n += int64(m)
		if werr != nil {
			d.closed = true // the reader went away: the content did not end
			return n, werr
		}
		if chunk, err = d.next(); err != nil {
			break
		}
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	d.end(err)
	return n, err
}

func (d *Download) end(err error) {
	if !d.closed && d.done != nil {
		d.done(err)
	}
	d.closed = true
}

// ReadFile starts reading the file p.
func (o *Ops) ReadFile(ctx context.Context, c fleet.Caller, id, p string) (*Download, error) {
	if p == "" {
		return nil, missingField("path", "src/main.go")
	}
	// The size is the agent's to check: it knows the file's.
	f, err := o.prepareFileOp(ctx, c, id, policy.Read, capability.Read, p, 0)
	if err != nil {
		return nil, err
	}
	stream, err := f.agent.Read(ctx, &pb.ReadRequest{Path: p, Etag: true, Capability: f.capTok, Policy: f.in.fileRules()})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, o.fileDenied(ctx, c, id, "read", p, err))
	}
	first, err := stream.Recv()
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read %s: %w", p, o.fileDenied(ctx, c, id, "read", p, err))
	}
	next := func() ([]byte, error) {
		m, err := stream.Recv()
		return m.GetData(), err
	}
	if first == nil {
		next = func() ([]byte, error) { return nil, io.EOF }
	}
	return &Download{ETag: first.GetEtag(), first: first.GetData(), next: next, done: func(err error) {
		if err != nil {
			o.log.Warn("read file: stream broke", "path", p, "err", err)
		}
	}}, nil
}

// WriteRequest is a file to write; its content comes apart.
type WriteRequest struct {
	Path string
	// Mode is the file's permission bits (0: 0644).
	Mode uint32
	// Size is how many bytes the content says it has (a chunked body: 0): the policy
	// decides on it, and again on every chunk that takes the content past it.
	Size int64
	// IfMatch, when set, is the content tag (Download.ETag) the file must still have: the
	// agent compares it and writes as one step, else the write is errdefs.ErrStale.
	IfMatch string
}

// WriteFile writes content to req.Path, replacing what was there once all of it arrived.
// Content that breaks off, or grows past what the policy or the capability allows, is
// refused, and nothing of it is kept.
func (o *Ops) WriteFile(ctx context.Context, c fleet.Caller, id string, req WriteRequest, content io.Reader) (api.FileInfo, error) {
	p := req.Path
	if p == "" {
		return api.FileInfo{}, missingField("path", "src/main.go")
	}
	mode := req.Mode
	if mode == 0 {
		mode = 0o644
	}
	decided := max(req.Size, 0)
	f, err := o.prepareFileOp(ctx, c, id, policy.Write, capability.Write, p, decided)
	if err != nil {
		return api.FileInfo{}, err
	}
	in, capTok := f.in, f.capTok
	held := capTok != ""
	// Content that breaks off cancels the write, and the agent discards the partial file
	// instead of committing it.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := f.agent.Write(wctx)
	if err != nil {
		return api.FileInfo{}, fmt.Errorf("write %s: %w", p, err)
	}
	buf := make([]byte, 256<<10)
	first := true
	var total int64
	for {
		n, rerr := content.Read(buf)
		if total += int64(n); total > MaxUpload {
			cancel()
			return api.FileInfo{}, fmt.Errorf("file over %d bytes: %w", MaxUpload, api.ErrTooLarge)
		}
		if total > decided && (in.pol != nil || held) {
			if err := o.decideWrite(ctx, c, id, in, p, total); err != nil {
				cancel()
				return api.FileInfo{}, err
			}
			decided = total
		}
		if n > 0 || first {
			msg := &pb.WriteRequest{Data: buf[:n]}
			if first {
				msg.Path, msg.Mode, msg.MakeParents, msg.Capability, msg.Policy = p, mode, true, capTok, in.fileRules()
				msg.IfMatch = req.IfMatch
				first = false
			}
			if err := stream.Send(msg); err != nil {
				break // the agent's answer below says why
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			cancel()
			if errors.Is(rerr, api.ErrTooLarge) {
				return api.FileInfo{}, fmt.Errorf("file over %d bytes: %w", MaxUpload, api.ErrTooLarge)
			}
			return api.FileInfo{}, fmt.Errorf("read request body: %w", errdefs.ErrInvalidArgument)
		}
	}
	info, err := stream.CloseAndRecv()
	if err != nil {
		return api.FileInfo{}, fmt.Errorf("write %s: %w", p, o.fileDenied(ctx, c, id, "write", p, err))
	}
	o.event(ctx, c.UserID, "sandbox.file_write", map[string]any{"sandbox": id, "path": info.Path, "size": info.Size, "policy": in.source})
	out := fileInfo(info)
	out.ETag = info.GetEtag()
	return out, nil
}

// missingField is the error of a request without a path it needs.
func missingField(name, example string) error {
	return fmt.Errorf("%s: give a path in the workspace, e.g. %q: %w", name, example, errdefs.ErrInvalidArgument)
}

// Mkdir makes a directory. The policy decides it as a Mkdir (deny_write applies,
// allowed_extensions and max_file_size do not); a capability must grant write on it.
func (o *Ops) Mkdir(ctx context.Context, c fleet.Caller, id string, req api.FileMkdirRequest) (api.FileInfo, error) {
	if req.Path == "" {
		return api.FileInfo{}, missingField("path", "src/pkg")
	}
	mode, err := dirMode(req.Mode)
	if err != nil {
		return api.FileInfo{}, err
	}
	f, err := o.prepareFileOp(ctx, c, id, policy.Mkdir, capability.Write, req.Path, 0)
	if err != nil {
		return api.FileInfo{}, err
	}
	info, err := f.agent.Mkdir(ctx, &pb.MkdirRequest{Path: req.Path, Parents: req.Parents, Mode: mode, Capability: f.capTok, Policy: f.in.fileRules()})
	if err != nil {
		return api.FileInfo{}, fmt.Errorf("mkdir %s: %w", req.Path, o.fileDenied(ctx, c, id, "mkdir", req.Path, err))
	}
	o.event(ctx, c.UserID, "sandbox.file_mkdir", map[string]any{"sandbox": id, "path": info.Path, "parents": req.Parents, "policy": f.in.source})
	return fileInfo(info), nil
}

// dirMode parses a mkdir's octal mode: permission bits and sticky. "" is the agent's
// default (755); 0 cannot be asked for, as the agent takes it for the default. Setgid is
// refused, as every set-id bit is in a sandbox (docs/security.md, host users).
func dirMode(m string) (uint32, error) {
	if m == "" {
		return 0, nil
	}
	mode, err := strconv.ParseUint(m, 8, 32)
	if err == nil && mode&0o6000 != 0 && mode&^0o7777 == 0 {
		return 0, fmt.Errorf("mode %q: setuid and setgid are refused: no file in a sandbox may have them; want an octal permission from 1 to 1777, like 755 (1000 is sticky): %w", m, errdefs.ErrInvalidArgument)
	}
	if err != nil || mode == 0 || mode&^0o1777 != 0 {
		return 0, fmt.Errorf("mode %q: want an octal permission from 1 to 1777, like 755 (1000 is sticky): %w", m, errdefs.ErrInvalidArgument)
	}
	return uint32(mode), nil
}

// Move renames a file or directory inside the workspace and answers where it is now.
// A capability must grant delete on from and write on to; the agent checks both again
// on the directories it really renames between.
//
// The policy decides from as a Delete: the name leaves its place, so deny_write
// protects it, and a directory holding a path an anchored pattern protects cannot be
// moved away (moving .git is refused under .git/hooks/**). It decides to by what
// arrives there, as the agent reports from just before the move: a file (or a symlink)
// is created at to (Create: deny_write, allowed_extensions, max_file_size at its size),
// and a directory brings a whole tree, so to is decided as a Delete is, which refuses a
// place where any path under it would be protected (moving a directory to .git is
// refused under .git/hooks/**); extensions and sizes do not apply to a directory, as for
// a mkdir. Code in the sandbox that swaps from between that report and the rename could
// slip past these two rules, but such code writes the workspace directly anyway: the
// policy bounds what the API is asked to do.
func (o *Ops) Move(ctx context.Context, c fleet.Caller, id string, req api.FileMoveRequest) (api.FileInfo, error) {
	switch {
	case req.From == "":
		return api.FileInfo{}, missingField("from", "src/old.go")
	case req.To == "":
		return api.FileInfo{}, missingField("to", "src/new.go")
	}
	if err := checkMove(req.From, req.To); err != nil {
		return api.FileInfo{}, err
	}
	agent, err := o.fleet.Agent(ctx, c, id)
	if err != nil {
		return api.FileInfo{}, err
	}
	in, err := o.policyOf(ctx, c, id)
	if err != nil {
		return api.FileInfo{}, err
	}
	if err := o.decideFile(ctx, c, id, in, policy.Delete, req.From, 0); err != nil {
		return api.FileInfo{}, fmt.Errorf("move %s to %s: %w", req.From, req.To, err)
	}
	capTok, err := o.capabilityMove(ctx, req.From, req.To)
	if err != nil {
		return api.FileInfo{}, err
	}
	if in.pol != nil {
		src, err := agent.Stat(ctx, &pb.StatRequest{Path: req.From})
		if err != nil {
			return api.FileInfo{}, fmt.Errorf("move %s: %w", req.From, err)
		}
		op, size := policy.Create, int64(src.Size)
		if src.Type == pb.FileType_FILE_TYPE_DIR {
			op, size = policy.Delete, 0
		}
		if err := o.decideFile(ctx, c, id, in, op, req.To, size); err != nil {
			return api.FileInfo{}, fmt.Errorf("move %s to %s: %w", req.From, req.To, err)
		}
	}
	info, err := agent.Move(ctx, &pb.MoveRequest{From: req.From, To: req.To, Overwrite: req.Overwrite, Capability: capTok, Policy: in.fileRules()})
	if err != nil {
		return api.FileInfo{}, fmt.Errorf("move %s to %s: %w", req.From, req.To, o.fileDenied(ctx, c, id, "move", req.To, err))
	}
	from, _ := wire.ResolvePath(req.From) // the agent took it: it resolves
	o.event(ctx, c.UserID, "sandbox.file_move", map[string]any{"sandbox": id, "from": from, "to": info.Path, "overwrite": req.Overwrite, "policy": in.source})
	return fileInfo(info), nil
}

// checkMove refuses a move that cannot be made, lexically: to the same path, or of a
// directory into itself (the kernel's EINVAL, which would not say why). Paths that do
// not resolve are left to the checks that follow, which say why.
func checkMove(from, to string) error {
	f, err := wire.ResolvePath(from)
	if err != nil {
		return nil
	}
	t, err := wire.ResolvePath(to)
	switch {
	case err != nil:
		return nil
	case f == t:
		return fmt.Errorf("from %q and to %q both name %s: a move needs two different paths: %w", from, to, f, errdefs.ErrInvalidArgument)
	case f != "." && strings.HasPrefix(t, f+"/"):
		return fmt.Errorf("to %q is inside from %q: nothing can be moved into itself: %w", to, from, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Remove deletes a file, a symlink (never its target) or, recursive, a directory and
// what it holds. The policy decides it as a Delete; a capability must grant delete on it.
func (o *Ops) Remove(ctx context.Context, c fleet.Caller, id, p string, recursive bool) error {
	if p == "" {
		return missingField("path", "src/main.go")
	}
	f, err := o.prepareFileOp(ctx, c, id, policy.Delete, capability.Delete, p, 0)
	if err != nil {
		return err
	}
	if err := f.agent.Remove(ctx, &pb.RemoveRequest{Path: p, Recursive: recursive, Capability: f.capTok, Policy: f.in.fileRules()}); err != nil {
		return fmt.Errorf("remove %s: %w", p, o.fileDenied(ctx, c, id, "remove", p, err))
	}
	rel, _ := wire.ResolvePath(p) // the agent took it: it resolves
	o.event(ctx, c.UserID, "sandbox.file_remove", map[string]any{"sandbox": id, "path": rel, "recursive": recursive, "policy": f.in.source})
	return nil
}
