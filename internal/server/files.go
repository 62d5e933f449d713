package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/capability"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/policy"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// maxUpload bounds one file written through the API.
const maxUpload = 1 << 30

// fileOp is what a file route has settled before it asks the agent.
type fileOp struct {
	conn *grpc.ClientConn
	// in is the policy in force: its file rules go to the agent, which decides them again
	// where the path really leads.
	in inForce
	// capTok is the request's capability reissued for the agent ("" without one).
	capTok string
}

// prepareFileOp reaches the request's sandbox (another user's is not found), decides op
// on the API path p for size bytes under the policy in force, and checks the request's
// capability for action on it.
func (s *Server) prepareFileOp(r *http.Request, c fleet.Caller, op policy.Op, action capability.Action, p string, size int64) (fileOp, error) {
	var f fileOp
	var err error
	id := r.PathValue("id")
	if f.conn, err = s.fleet.Conn(r.Context(), c, id); err != nil {
		return f, err
	}
	if f.in, err = s.policyOf(r.Context(), c, id); err != nil {
		return f, err
	}
	if err = s.decideFile(r.Context(), c, id, f.in, op, p, size); err != nil {
		return f, err
	}
	f.capTok, err = s.capabilityFile(r.Context(), p, action, size)
	return f, err
}

// decideWrite decides a write that has grown to size bytes: by the policy, and by the
// capability the request acts under.
func (s *Server) decideWrite(ctx context.Context, c fleet.Caller, id string, in inForce, p string, size int64) error {
	if err := s.decideFile(ctx, c, id, in, policy.Write, p, size); err != nil {
		return err
	}
	_, err := s.capabilityFile(ctx, p, capability.Write, size)
	return err
}

// fromAgent is the agent's error for a request, in the taxonomy; a refusal the agent
// made itself (a capability token, or the policy's file rules where the path really
// leads) is recorded as action, with the operation and the path, like the control
// plane's own refusals.
func (s *Server) fromAgent(r *http.Request, c fleet.Caller, action string, detail map[string]any, err error) error {
	err = errdefs.FromGRPC(err)
	if errors.Is(err, errdefs.ErrPermissionDenied) {
		detail["sandbox"], detail["by"], detail["error"] = r.PathValue("id"), "agent", err.Error()
		s.event(r.Context(), c.UserID, action, detail)
	}
	return err
}

// Files go through the agent's jailed file API: paths are relative to the workspace (a
// leading "/workspace/" or "/" is accepted), and the agent refuses anything that would
// leave it, symlinks included.

func filePath(r *http.Request) (string, error) {
	p := r.URL.Query().Get("path")
	if p == "" {
		return "", fmt.Errorf("query parameter path: give a path in the workspace, e.g. ?path=src/main.go: %w", errdefs.ErrInvalidArgument)
	}
	return p, nil
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	p := r.URL.Query().Get("path")
	if p == "" {
		p = "."
	}
	f, err := s.prepareFileOp(r, c, policy.Read, capability.Read, p, 0)
	if err != nil {
		return err
	}
	res, err := pb.NewFilesClient(f.conn).List(r.Context(), &pb.ListFilesRequest{Path: p, Capability: f.capTok, Policy: f.in.fileRules()})
	if err != nil {
		return fmt.Errorf("list %s: %w", p, s.fromAgent(r, c, "sandbox.file_denied", map[string]any{"op": "list", "path": p}, err))
	}
	out := api.FileList{Path: p, Entries: []api.FileInfo{}}
	for _, e := range res.Entries {
		out.Entries = append(out.Entries, fileInfo(e))
	}
	api.WriteJSON(w, http.StatusOK, out)
	return nil
}

func fileInfo(e *pb.FileInfo) api.FileInfo {
	return api.FileInfo{
		Name: path.Base(e.Path), Path: e.Path, Size: int64(e.Size), Mode: fmt.Sprintf("%04o", e.Mode),
		IsDir: e.Type == pb.FileType_FILE_TYPE_DIR, ModTime: time.Unix(0, e.MtimeUnixNano).UTC(),
	}
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	p, err := filePath(r)
	if err != nil {
		return err
	}
	// The size is the agent's to check: it knows the file's.
	f, err := s.prepareFileOp(r, c, policy.Read, capability.Read, p, 0)
	if err != nil {
		return err
	}
	stream, err := pb.NewFilesClient(f.conn).Read(r.Context(), &pb.ReadRequest{Path: p, Etag: true, Capability: f.capTok, Policy: f.in.fileRules()})
	if err != nil {
		return fmt.Errorf("read %s: %w", p, s.fromAgent(r, c, "sandbox.file_denied", map[string]any{"op": "read", "path": p}, err))
	}
	// The first chunk (or the error) comes before any header is written, so that a missing
	// file is a 404, not a 200 with an empty body.
	first, err := stream.Recv()
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read %s: %w", p, s.fromAgent(r, c, "sandbox.file_denied", map[string]any{"op": "read", "path": p}, err))
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Disposition", "attachment")
	h.Set("Cache-Control", "no-store")
	if first != nil && first.Etag != "" {
		h.Set("ETag", quoteETag(first.Etag))
	}
	w.WriteHeader(http.StatusOK)
	for chunk := first; chunk != nil; {
		if _, err := w.Write(chunk.Data); err != nil {
			return errResponded
		}
		if chunk, err = stream.Recv(); err != nil {
			if !errors.Is(err, io.EOF) {
				s.log.Warn("read file: stream broke", "path", p, "err", err)
			}
			break
		}
	}
	return errResponded
}

func (s *Server) writeFile(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	p, err := filePath(r)
	if err != nil {
		return err
	}
	mode := uint64(0o644)
	if m := r.URL.Query().Get("mode"); m != "" {
		if mode, err = strconv.ParseUint(m, 8, 32); err != nil || mode > 0o777 {
			return invalidQuery("mode", m, "an octal permission like 644")
		}
	}
	// The policy decides on the size the body says it has (a chunked body starts at 0),
	// and again on every chunk that takes it past that: a body that grows past
	// files.max_file_size is refused there, and nothing of it is kept.
	decided := max(r.ContentLength, 0)
	f, err := s.prepareFileOp(r, c, policy.Write, capability.Write, p, decided)
	if err != nil {
		return err
	}
	ifMatch, err := ifMatchOf(r)
	if err != nil {
		return err
	}
	conn, in, capTok := f.conn, f.in, f.capTok
	held := capTok != ""
	// A body that breaks off cancels the write, and the agent discards the partial file
	// instead of committing it.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stream, err := pb.NewFilesClient(conn).Write(ctx)
	if err != nil {
		return fmt.Errorf("write %s: %w", p, errdefs.FromGRPC(err))
	}
	body := http.MaxBytesReader(w, r.Body, maxUpload)
	buf := make([]byte, 256<<10)
	first := true
	var total int64
	for {
		n, rerr := body.Read(buf)
		if total += int64(n); total > decided && (in.pol != nil || held) {
			if err := s.decideWrite(r.Context(), c, r.PathValue("id"), in, p, total); err != nil {
				cancel()
				return err
			}
			decided = total
		}
		if n > 0 || first {
			msg := &pb.WriteRequest{Data: buf[:n]}
			if first {
				msg.Path, msg.Mode, msg.MakeParents, msg.Capability, msg.Policy = p, uint32(mode), true, capTok, in.fileRules()
				msg.IfMatch = ifMatch
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
			var maxErr *http.MaxBytesError
			cancel()
			if errors.As(rerr, &maxErr) {
				return fmt.Errorf("file over %d bytes: %w", maxUpload, api.ErrTooLarge)
			}
			return fmt.Errorf("read request body: %w", errdefs.ErrInvalidArgument)
		}
	}
	info, err := stream.CloseAndRecv()
	if err != nil {
		return fmt.Errorf("write %s: %w", p, s.fromAgent(r, c, "sandbox.file_denied", map[string]any{"op": "write", "path": p}, err))
	}
	s.event(r.Context(), c.UserID, "sandbox.file_write", map[string]any{"sandbox": r.PathValue("id"), "path": info.Path, "size": info.Size, "policy": in.source})
	if info.Etag != "" {
		w.Header().Set("ETag", quoteETag(info.Etag))
	}
	api.WriteJSON(w, http.StatusOK, fileInfo(info))
	return nil
}

// maxFileOpBody bounds a mkdir or move request: two paths of at most PATH_MAX, escaped.
const maxFileOpBody = 64 << 10

// missingField is the error of a request body without a field it needs.
func missingField(name, example string) error {
	return fmt.Errorf("%s: give a path in the workspace, e.g. %q: %w", name, example, errdefs.ErrInvalidArgument)
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

// makeDir makes a directory. The policy decides it as a Mkdir (deny_write applies,
// allowed_extensions and max_file_size do not); a capability must grant write on it.
func (s *Server) makeDir(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	var req api.FileMkdirRequest
	if err := api.DecodeJSON(w, r, &req, maxFileOpBody); err != nil {
		return err
	}
	if req.Path == "" {
		return missingField("path", "src/pkg")
	}
	mode, err := dirMode(req.Mode)
	if err != nil {
		return err
	}
	f, err := s.prepareFileOp(r, c, policy.Mkdir, capability.Write, req.Path, 0)
	if err != nil {
		return err
	}
	info, err := pb.NewFilesClient(f.conn).Mkdir(r.Context(), &pb.MkdirRequest{Path: req.Path, Parents: req.Parents, Mode: mode, Capability: f.capTok, Policy: f.in.fileRules()})
	if err != nil {
		return fmt.Errorf("mkdir %s: %w", req.Path, s.fromAgent(r, c, "sandbox.file_denied", map[string]any{"op": "mkdir", "path": req.Path}, err))
	}
	s.event(r.Context(), c.UserID, "sandbox.file_mkdir", map[string]any{"sandbox": r.PathValue("id"), "path": info.Path, "parents": req.Parents, "policy": f.in.source})
	api.WriteJSON(w, http.StatusOK, fileInfo(info))
	return nil
}

// moveFile renames a file or directory inside the workspace and answers where it is now.
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
func (s *Server) moveFile(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	var req api.FileMoveRequest
	if err := api.DecodeJSON(w, r, &req, maxFileOpBody); err != nil {
		return err
	}
	switch {
	case req.From == "":
		return missingField("from", "src/old.go")
	case req.To == "":
		return missingField("to", "src/new.go")
	}
	if err := checkMove(req.From, req.To); err != nil {
		return err
	}
	conn, err := s.fleet.Conn(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	in, err := s.policyOf(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	id, fc := r.PathValue("id"), pb.NewFilesClient(conn)
	if err := s.decideFile(r.Context(), c, id, in, policy.Delete, req.From, 0); err != nil {
		return fmt.Errorf("move %s to %s: %w", req.From, req.To, err)
	}
	capTok, err := s.capabilityMove(r.Context(), req.From, req.To)
	if err != nil {
		return err
	}
	if in.pol != nil {
		src, err := fc.Stat(r.Context(), &pb.StatRequest{Path: req.From})
		if err != nil {
			return fmt.Errorf("move %s: %w", req.From, errdefs.FromGRPC(err))
		}
		op, size := policy.Create, int64(src.Size)
		if src.Type == pb.FileType_FILE_TYPE_DIR {
			op, size = policy.Delete, 0
		}
		if err := s.decideFile(r.Context(), c, id, in, op, req.To, size); err != nil {
			return fmt.Errorf("move %s to %s: %w", req.From, req.To, err)
		}
	}
	info, err := fc.Move(r.Context(), &pb.MoveRequest{From: req.From, To: req.To, Overwrite: req.Overwrite, Capability: capTok, Policy: in.fileRules()})
	if err != nil {
		return fmt.Errorf("move %s to %s: %w", req.From, req.To, s.fromAgent(r, c, "sandbox.file_denied", map[string]any{"op": "move", "path": req.To}, err))
	}
	from, _ := wire.ResolvePath(req.From) // the agent took it: it resolves
	s.event(r.Context(), c.UserID, "sandbox.file_move", map[string]any{"sandbox": id, "from": from, "to": info.Path, "overwrite": req.Overwrite, "policy": in.source})
	api.WriteJSON(w, http.StatusOK, fileInfo(info))
	return nil
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

// removeFile deletes a file, a symlink (never its target) or, with recursive=true, a
// directory and what it holds. The policy decides it as a Delete; a capability must
// grant delete on it.
func (s *Server) removeFile(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	p, err := filePath(r)
	if err != nil {
		return err
	}
	recursive := false
	if v := r.URL.Query().Get("recursive"); v != "" {
		if recursive, err = strconv.ParseBool(v); err != nil {
			return invalidQuery("recursive", v, "true or false")
		}
	}
	f, err := s.prepareFileOp(r, c, policy.Delete, capability.Delete, p, 0)
	if err != nil {
		return err
	}
	if _, err := pb.NewFilesClient(f.conn).Remove(r.Context(), &pb.RemoveRequest{Path: p, Recursive: recursive, Capability: f.capTok, Policy: f.in.fileRules()}); err != nil {
		return fmt.Errorf("remove %s: %w", p, s.fromAgent(r, c, "sandbox.file_denied", map[string]any{"op": "remove", "path": p}, err))
	}
	rel, _ := wire.ResolvePath(p) // the agent took it: it resolves
	s.event(r.Context(), c.UserID, "sandbox.file_remove", map[string]any{"sandbox": r.PathValue("id"), "path": rel, "recursive": recursive, "policy": f.in.source})
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// quoteETag is tag as an HTTP entity tag (strong: it names the bytes).
func quoteETag(tag string) string { return `"` + tag + `"` }

// ifMatchOf reads a PUT's If-Match: one strong entity tag, as GET files/content gave it.
// Absent: an unconditional write. "*" and lists are refused, as is a weak tag (W/): a
// save is based on one read.
func ifMatchOf(r *http.Request) (string, error) {
	v := strings.TrimSpace(r.Header.Get("If-Match"))
	if v == "" {
		return "", nil
	}
	tag, ok := strings.CutPrefix(v, `"`)
	tag, ok2 := strings.CutSuffix(tag, `"`)
	if ok && ok2 && tag != "" && len(tag) <= 128 && strings.Trim(tag, "0123456789abcdefABCDEF-_:.") == "" {
		return tag, nil
	}
	return "", fmt.Errorf("If-Match: %q: want the one ETag that GET files/content answered, in quotes: %w", errdefs.Clip(v, 80), errdefs.ErrInvalidArgument)
}
