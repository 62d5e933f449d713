// Package files serves the agent's Files gRPC service: reading, writing, listing, moving
// and watching files in the sandbox's workspace on behalf of the trusted host.
//
// Threat model. The caller (runner, control plane, CLI) is trusted; the files are not. Code
// inside the sandbox writes the workspace and may plant symlinks, FIFOs and deep trees, and may
// race every check this package makes. So:
//
//   - Every path is resolved inside the workspace through an [os.Root], whose openat-based
//     resolution refuses to leave the root through ".." or a symlink, even one swapped in
//     while we walk. No operation joins strings onto the workspace's host path and opens that.
//   - A caller's path that climbs out lexically ("../x", "/../../etc") is malformed:
//     InvalidArgument. A path that would leave through a symlink planted in the workspace
//     (relative or absolute target) is refused: PermissionDenied.
//   - Stat, List and Watch never follow a symlink found in the tree; they report it as a
//     symlink with its stored target. Only the components of the caller's own path are
//     followed, and only while they stay inside the workspace.
//   - Writes are atomic (temp file, then rename) and never write through a symlink: a symlink
//     at the target path is replaced.
//   - Reads open with O_NONBLOCK and accept only regular files, so a planted FIFO or device
//     cannot hang or trick the agent.
//   - Sizes, listings and watches are capped so a hostile tree cannot exhaust the agent.
//   - Error messages name the path as the caller gave it, never the workspace's host path.
//   - A request may carry a capability token (package capability), which bounds it further:
//     the [Guard] the agent installs verifies it on where the request really acts, in the
//     sandbox's view (/workspace/…). That is taken from the kernel's account of what was
//     opened (/proc/self/fd of the descriptor): the file read or the directory listed; for
//     a file written, made, moved or removed, the directory it is in, opened once and acted
//     in, and its name. So a symlink from a granted directory into another gains nothing,
//     and neither does one swapped in while the request runs. A directory renamed between
//     the check and the system call carries the request with it; Write verifies again
//     just before its rename, Mkdir and make_parents verify where the directories will be
//     before making any.
//
// Paths: "/src/a.go", "src/a.go" and "/workspace/src/a.go" (the sandbox's view) all name
// src/a.go in the workspace; "", "/" and "/workspace" name the workspace itself. Paths we
// return are relative to the workspace, with forward slashes ("." for the workspace).
//
// Modes on the wire are Unix permission bits plus setuid (04000), setgid (02000) and sticky
// (01000); no file type bits.
package files

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"google.golang.org/grpc"

	"github.com/paddockhq/paddock/internal/agent/identity"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire/agentv1"
)

// Limits a hostile workspace must not be able to push the agent past.
const (
	// MaxWriteBytes caps one Write: beyond it the write fails with ErrLimitExceeded.
	MaxWriteBytes = 1 << 30
	// MaxListEntries caps one List, so a tree of millions of files cannot exhaust memory.
	MaxListEntries = 10000
	// MaxListDepth bounds List's recursion; deeper requests are taken as this depth, because
	// each level holds a directory open.
	MaxListDepth = 64
	// MaxWatchedDirs caps the directories one Watch holds, each costing an fd and an inotify
	// watch.
	MaxWatchedDirs = 4096
	// ChunkSize is the largest FileChunk Read sends.
	ChunkSize = 256 << 10
)

// Service implements agentv1.FilesServer over one workspace directory. It is safe for
// concurrent use; all its state is the open workspace root.
type Service struct {
	agentv1.UnimplementedFilesServer

	root *os.Root
	// top is the workspace directory open, to tell where in it an open file is (where).
	top *os.File
	log *slog.Logger
	// user is whose filesystem identity every operation runs with (see ActAs).
	user identity.User
	// guard verifies the capability tokens requests carry (see GuardWith); nil refuses them.
	guard Guard

	// unjailed, set by tests, stands for kernelFollowsNoFollow's answer.
	unjailed  error
	offLogged sync.Once
	// renameFirst: the workspace's file system orders a replaced file's data before the
	// rename (renameFirstOn), so a Write that replaces a file syncs it after the rename.
	renameFirst bool
	// commitMu makes a Write's If-Match check and its rename one step among Writes.
	commitMu sync.Mutex
	// beforeCommit, set by tests, runs between that check and the rename.
	beforeCommit func()

	// Limits, fields so that tests can lower them.
	maxWrite   int64
	maxList    int
	maxWatches int
}

var _ agentv1.FilesServer = (*Service)(nil)

// New opens workspace as an os.Root, which anchors every later operation to that directory
// even if its host path is renamed or replaced. A nil log discards.
func New(workspace string, log *slog.Logger) (*Service, error) {
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	top, err := root.Open(".")
	if err != nil {
		root.Close()
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{
		root:        root,
		top:         top,
		log:         log,
		renameFirst: renameFirstOn(workspace),
		maxWrite:    MaxWriteBytes,
		maxList:     MaxListEntries,
		maxWatches:  MaxWatchedDirs,
	}, nil
}

// ActAs makes every later operation run with u's filesystem identity: with u's permissions
// and no more, creating files u owns. The agent calls it when it runs as a more privileged
// user than the sandbox's commands.
func (s *Service) ActAs(u identity.User) { s.user = u }

// do runs an operation as s.user, unless the kernel cannot keep the workspace's jail.
func (s *Service) do(f func() error) error {
	if err := s.jailHolds(); err != nil {
		return errdefs.ToGRPC(err)
	}
	return errdefs.ToGRPC(identity.Do(s.user, f))
}

// jailHolds asks the kernel, at the first operation rather than at the agent's start (a
// sandbox that never uses the file API pays nothing), whether os.Root's walk can hold.
func (s *Service) jailHolds() error {
	err := s.unjailed
	if err == nil {
		err = kernelFollowsNoFollow()
	}
	if err != nil {
		s.offLogged.Do(func() { s.log.Error("file API off", "err", err) })
	}
	return err
}

// Close releases the workspace root; calls in flight or made afterwards fail.
func (s *Service) Close() error {
	return errors.Join(s.top.Close(), s.root.Close())
}

// Read streams a regular file, or the range [offset, offset+length) of it (length 0: to
// EOF), in chunks of at most ChunkSize. A directory or special file is InvalidArgument.
func (s *Service) Read(req *agentv1.ReadRequest, stream grpc.ServerStreamingServer[agentv1.FileChunk]) error {
	return s.do(func() error { return s.read(stream.Context(), req, stream.Send) })
}

// Write replaces a file atomically with the data of the stream: a temp file in the same
// directory, renamed over the path when the stream ends, removed if it fails. Whatever was
// at the path (a symlink included) is replaced, never written through; a directory there is
// refused. The mode defaults to 0644 and is set exactly, whatever the umask.
func (s *Service) Write(stream grpc.ClientStreamingServer[agentv1.WriteRequest, agentv1.FileInfo]) error {
	return s.do(func() error {
		info, err := s.write(stream)
		if err != nil {
			return err
		}
		return stream.SendAndClose(info)
	})
}

// Stat describes a path without following a final symlink: a symlink is reported as one,
// with its stored target.
func (s *Service) Stat(_ context.Context, req *agentv1.StatRequest) (*agentv1.FileInfo, error) {
	var info *agentv1.FileInfo
	err := s.do(func() (err error) { info, err = s.stat(req.GetPath()); return err })
	return info, err
}

// List describes a directory's entries sorted by path, recursing req.Depth levels (0 and 1:
// the entries only) but never into a symlinked directory. More than MaxListEntries is
// ResourceExhausted.
func (s *Service) List(ctx context.Context, req *agentv1.ListFilesRequest) (*agentv1.ListFilesResponse, error) {
	var resp *agentv1.ListFilesResponse
	err := s.do(func() (err error) { resp, err = s.list(ctx, req); return err })
	return resp, err
}

// Mkdir creates a directory (mode default 0755, set exactly), and its parents when asked.
// An existing directory is AlreadyExists unless parents is set, as with mkdir -p.
func (s *Service) Mkdir(ctx context.Context, req *agentv1.MkdirRequest) (*agentv1.FileInfo, error) {
	var info *agentv1.FileInfo
	err := s.do(func() (err error) { info, err = s.mkdir(ctx, req); return err })
	return info, err
}

// Move renames a file, directory or symlink inside the workspace. An existing target is
// AlreadyExists unless overwrite is set, checked atomically by the kernel
// (RENAME_NOREPLACE). The workspace itself can be neither moved nor replaced.
func (s *Service) Move(ctx context.Context, req *agentv1.MoveRequest) (*agentv1.FileInfo, error) {
	var info *agentv1.FileInfo
	err := s.do(func() (err error) { info, err = s.move(ctx, req); return err })
	return info, err
}

// Remove deletes a file, a symlink (never its target) or a directory; a non-empty
// directory needs recursive (FailedPrecondition otherwise). The workspace itself cannot be
// removed.
func (s *Service) Remove(ctx context.Context, req *agentv1.RemoveRequest) (*agentv1.RemoveResponse, error) {
	if err := s.do(func() error { return s.remove(ctx, req) }); err != nil {
		return nil, err
	}
	return &agentv1.RemoveResponse{}, nil
}

// Watch streams changes under a path until the caller goes away. The response headers are
// sent once the watch is in place, so a caller that waits for them misses nothing after.
// Recursive watches add directories created later; a new directory's Create is sent once
// it is watched, followed by Creates for what it already held (which inotify may also
// report: expect the odd duplicate). Symlinked directories are never watched through. A
// directory moved within the tree may stop reporting. Events lost to an overflow end the
// stream with ResourceExhausted, so a caller mirroring the tree knows to rescan.
func (s *Service) Watch(req *agentv1.WatchRequest, stream grpc.ServerStreamingServer[agentv1.FileEvent]) error {
	return s.do(func() error { return s.watch(req, stream) })
}
