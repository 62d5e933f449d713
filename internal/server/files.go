package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/capability"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/policy"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// maxUpload bounds one file written through the API.
const maxUpload = 1 << 30

// decideFileOp decides op on path p of the request's sandbox under the policy in force.
func (s *Server) decideFileOp(r *http.Request, c fleet.Caller, op policy.Op, p string, size int64) error {
	in, err := s.policyOf(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	return s.decideFile(r.Context(), c, r.PathValue("id"), in, op, p, size)
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
	conn, err := s.fleet.Conn(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := s.decideFileOp(r, c, policy.Read, p, 0); err != nil {
		return err
	}
	capTok, err := s.capabilityFile(r.Context(), p, capability.Read, 0)
	if err != nil {
		return err
	}
	res, err := pb.NewFilesClient(conn).List(r.Context(), &pb.ListFilesRequest{Path: p, Capability: capTok})
	if err != nil {
		return fmt.Errorf("list %s: %w", p, errdefs.FromGRPC(err))
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
	conn, err := s.fleet.Conn(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := s.decideFileOp(r, c, policy.Read, p, 0); err != nil {
		return err
	}
	// The size is the agent's to check: it knows the file's.
	capTok, err := s.capabilityFile(r.Context(), p, capability.Read, 0)
	if err != nil {
		return err
	}
	stream, err := pb.NewFilesClient(conn).Read(r.Context(), &pb.ReadRequest{Path: p, Capability: capTok})
	if err != nil {
		return fmt.Errorf("read %s: %w", p, errdefs.FromGRPC(err))
	}
	// The first chunk (or the error) comes before any header is written, so that a missing
	// file is a 404, not a 200 with an empty body.
	first, err := stream.Recv()
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read %s: %w", p, errdefs.FromGRPC(err))
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Disposition", "attachment")
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
	conn, err := s.fleet.Conn(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	// The policy decides on the size the body says it has (a chunked body starts at 0),
	// and again on every chunk that takes it past that: a body that grows past
	// files.max_file_size is refused there, and nothing of it is kept.
	in, err := s.policyOf(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	decided := max(r.ContentLength, 0)
	if err := s.decideFile(r.Context(), c, r.PathValue("id"), in, policy.Write, p, decided); err != nil {
		return err
	}
	capTok, err := s.capabilityFile(r.Context(), p, capability.Write, decided)
	if err != nil {
		return err
	}
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
				msg.Path, msg.Mode, msg.MakeParents, msg.Capability = p, uint32(mode), true, capTok
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
		return fmt.Errorf("write %s: %w", p, errdefs.FromGRPC(err))
	}
	s.event(r.Context(), c.UserID, "sandbox.file_write", map[string]any{"sandbox": r.PathValue("id"), "path": info.Path, "size": info.Size, "policy": in.source})
	api.WriteJSON(w, http.StatusOK, fileInfo(info))
	return nil
}
