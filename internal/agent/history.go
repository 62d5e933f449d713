package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/paddockhq/paddock/internal/agent/files"
	"github.com/paddockhq/paddock/internal/agent/history"
	"github.com/paddockhq/paddock/internal/agent/identity"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// Why the History service is unavailable, by tier.
const (
	HistoryProcessTierReason = "workspace history is unavailable in the process tier (--insecure): the agent runs as the sandbox user there, so the sandbox's commands could rewrite it; use the container tier"
	HistoryMicroVMTierReason = "workspace history is unavailable in the microvm tier: the VM has no store outside the workspace yet; use the container tier"
	historyNoStoreReason     = "workspace history is unavailable: this sandbox was started without a history store"
)

// How the agent checkpoints changes made by any process (cause "watcher"), debounced: the
// history's inotify watcher wakes it at the first change no checkpoint has recorded, and it
// checkpoints once the workspace has seen no further change for settleFor, or
// reconcileEvery after that first change if changes keep coming (a build that writes for a
// minute makes a checkpoint every reconcileEvery, not one at the end, nor one per file).
// Such a checkpoint reads only the directories that changed. Without a watcher that can
// vouch for every directory (no inotify, a watch that could not be added) the agent
// checkpoints every reconcileEvery instead. Every fullReconcileEvery a walk of the whole
// workspace (one fstatat per entry) picks up what inotify does not report (writes through
// mmap or a hard link from elsewhere). Variables for tests.
var (
	settleFor          = 500 * time.Millisecond
	reconcileEvery     = 3 * time.Second
	fullReconcileEvery = 60 * time.Second
)

// maxAutoMessage bounds the message of a checkpoint the agent takes by itself (it quotes a
// program or a path).
const maxAutoMessage = 200

// historyService serves the History RPCs and takes the agent's own checkpoints. One mutex
// serializes every history operation, and holds a restore together with the app's restart,
// so that no checkpoint lands between the restored files and the app that runs on them.
type historyService struct {
	pb.UnimplementedHistoryServer

	mu sync.Mutex
	h  *history.History // nil when unavailable
	// unavailable says why h is nil.
	unavailable string
	app         *supervisor // nil without a supervised app
	hasMain     bool        // a main command runs, supervised or not
	hotReload   bool        // the app reloads changed files itself
	log         *slog.Logger

	// events tells subscribers what happens to the history (history_events.go); compacted
	// is how many checkpoints the budget had dropped when it last looked.
	events    *eventHub
	compacted int
	// lastBudget is the last budget refusal published (overBudget), "" after a success.
	lastBudget string
	// stopping ends Events streams when the agent stops (set by Run).
	stopping <-chan struct{}
	// first is closed once the first checkpoint (the workspace as the agent found it) is
	// taken, or at once without a store. A change through the agent waits for it
	// (afterFirst), so that the change is recorded as a checkpoint of its own instead of
	// being folded into that first one by a scan that happened to run after it.
	first     chan struct{}
	firstOnce sync.Once
}

// firstDone closes first.
func (s *historyService) firstDone() { s.firstOnce.Do(func() { close(s.first) }) }

// afterFirst waits until the first checkpoint is taken (or ctx ends).
func (s *historyService) afterFirst(ctx context.Context) {
	select {
	case <-s.first:
	case <-ctx.Done():
	}
}

var _ pb.HistoryServer = (*historyService)(nil)

// openHistory opens the workspace's history when the tier and the envelope give it a
// store. A store that cannot be opened leaves the agent serving, without history: the
// sandbox is still usable, and every History call says why.
func openHistory(env *wire.Envelope, owner identity.User, log *slog.Logger) *historyService {
	s := &historyService{log: log, hasMain: env.Main != nil, hotReload: env.Main != nil && env.Main.HotReload, events: newEventHub(), first: make(chan struct{})}
	switch {
	case env.Tier == wire.TierProcess:
		s.unavailable = HistoryProcessTierReason
	case env.Tier == wire.TierMicroVM:
		s.unavailable = HistoryMicroVMTierReason
	case env.HistoryDir == "":
		s.unavailable = historyNoStoreReason
	}
	if s.unavailable != "" {
		log.Warn("history unavailable", "tier", env.Tier, "reason", s.unavailable)
		return s
	}
	if err := checkPrivate(env.HistoryDir); err != nil {
		s.unavailable = "workspace history is unavailable: " + err.Error()
		log.Error("history unavailable", "err", err)
		return s
	}
	opts := []history.Option{history.WithBudget(wire.HistoryBudget), history.WithWatcher()}
	if owner != (identity.User{}) {
		opts = append(opts, history.WithOwner(int(owner.UID), int(owner.GID)))
	}
	h, err := history.Open(env.Workspace, env.HistoryDir, opts...)
	if err != nil {
		s.unavailable = "workspace history could not be opened: " + err.Error()
		log.Error("history unavailable", "err", err)
		return s
	}
	if r := h.Recovered(); r != "" {
		log.Warn("history recovered", "what", r)
		s.events.publish(&pb.HistoryEvent{Kind: EventRecovery, Note: r})
	}
	s.h = h
	s.compacted = oldestCompacted(h)
	return s
}

// checkPrivate refuses a store the sandbox's commands could reach: it must be a directory
// of the agent's own user that nobody else may enter.
func checkPrivate(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("history store: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("history store %s is not a directory", dir)
	case !ok || int(st.Uid) != os.Geteuid():
		return fmt.Errorf("history store %s does not belong to the agent's user", dir)
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("history store %s has mode %04o: others could reach it", dir, fi.Mode().Perm())
	}
	return nil
}

// start takes the first checkpoint (the workspace as the agent found it, which undo of
// the first change goes back to) and then checkpoints the changes of any process
// (watchLoop) until ctx ends. The lock is taken before start returns, so that no other
// checkpoint comes first.
func (s *historyService) start(ctx context.Context, wg *sync.WaitGroup) {
	if s.h == nil {
		s.firstDone()
		return
	}
	s.mu.Lock()
	h := s.h
	wg.Go(func() {
		s.checkpointLocked(history.CauseWatcher, "the workspace as the agent found it")
		s.mu.Unlock()
		s.firstDone()
		s.watchLoop(ctx, h)
	})
}

// watchLoop checkpoints what any process changes in the workspace, debounced (see
// settleFor), and walks it whole every fullReconcileEvery.
func (s *historyService) watchLoop(ctx context.Context, h *history.History) {
	lastFull := time.Now()
	for ctx.Err() == nil {
		wctx, cancel := context.WithTimeout(ctx, reconcileEvery)
		err := h.WaitChange(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			settle(ctx, h)
			s.record(history.CauseWatcher, "")
		case errors.Is(err, context.DeadlineExceeded):
			// Quiet for reconcileEvery. A watcher that could not watch every directory
			// would not have woken us for a change in the others: look.
			if !h.Watching() {
				s.record(history.CauseWatcher, "")
			}
		default: // no watcher (ErrNoWatcher), or it failed: check on the period
			if !sleepCtx(ctx, reconcileEvery) {
				return
			}
			s.record(history.CauseWatcher, "")
		}
		if time.Since(lastFull) >= fullReconcileEvery {
			s.reconcile()
			lastFull = time.Now()
		}
	}
}

// settle returns once the workspace has seen no change for settleFor, or reconcileEvery
// after it was called, or when ctx ends.
func settle(ctx context.Context, h *history.History) {
	deadline := time.Now().Add(reconcileEvery)
	seen := h.Activity()
	for {
		wait := min(settleFor, time.Until(deadline))
		if wait <= 0 || !sleepCtx(ctx, wait) {
			return
		}
		now := h.Activity()
		if now == seen {
			return
		}
		seen = now
	}
}

// sleepCtx sleeps for d, or until ctx ends (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// reconcile checkpoints whatever changed, found by a walk of the whole workspace.
func (s *historyService) reconcile() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h == nil {
		return
	}
	c, created, err := s.h.Reconcile("")
	if err != nil {
		s.log.Warn("reconcile", "err", err)
		s.overBudget(err)
		return
	}
	s.lastBudget = ""
	if created {
		s.publishCheckpoint(c)
	}
}

// record checkpoints the workspace after a change by cause. A failure is logged, not
// returned: the change it follows has happened, and the next checkpoint picks it up.
func (s *historyService) record(cause, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h != nil {
		s.checkpointLocked(cause, message)
	}
}

func (s *historyService) checkpointLocked(cause, message string) {
	if len(message) > maxAutoMessage {
		message = message[:maxAutoMessage] + "…"
	}
	c, created, err := s.h.Checkpoint(cause, message)
	if err != nil {
		s.log.Warn("checkpoint", "cause", cause, "err", err)
		s.overBudget(err)
		return
	}
	s.lastBudget = ""
	if created {
		s.log.Debug("checkpoint", "id", c.ID, "cause", cause, "changed", c.Changed)
		s.publishCheckpoint(c)
	}
}

// overBudget tells subscribers that a checkpoint was refused by the history's size budget,
// once per refusal that differs from the last (the watcher tries again at every change).
func (s *historyService) overBudget(err error) {
	if !errors.Is(err, errdefs.ErrLimitExceeded) || err.Error() == s.lastBudget {
		return
	}
	s.lastBudget = err.Error()
	s.events.publish(&pb.HistoryEvent{Kind: EventBudget, Note: err.Error()})
}

// Close closes the store once no operation holds it.
func (s *historyService) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h == nil {
		return
	}
	if err := s.h.Close(); err != nil {
		s.log.Warn("close history", "err", err)
	}
	s.h = nil
}

// open returns the store, or the typed error saying why there is none.
func (s *historyService) open() (*history.History, error) {
	if s.h == nil {
		return nil, errdefs.ToGRPC(fmt.Errorf("%s: %w", s.unavailable, errdefs.ErrUnavailable))
	}
	return s.h, nil
}

func (s *historyService) Checkpoint(_ context.Context, req *pb.CheckpointRequest) (*pb.CheckpointResponse, error) {
	if err := checkMessage(req.GetMessage()); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h, err := s.open()
	if err != nil {
		return nil, err
	}
	c, created, err := h.Checkpoint(history.CauseManual, req.GetMessage())
	if err != nil {
		return nil, errdefs.ToGRPC(err)
	}
	if created {
		s.publishCheckpoint(c)
	}
	return &pb.CheckpointResponse{Checkpoint: checkpointInfo(c), Created: created}, nil
}

// maxMessage bounds a checkpoint's or a transaction's message from a caller.
const maxMessage = 4096

// checkMessage refuses a caller's message over maxMessage.
func checkMessage(m string) error {
	if len(m) > maxMessage {
		return errdefs.ToGRPC(fmt.Errorf("message is %d bytes, over %d: %w", len(m), maxMessage, errdefs.ErrInvalidArgument))
	}
	return nil
}

func (s *historyService) List(context.Context, *pb.HistoryListRequest) (*pb.HistoryListResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, err := s.open()
	if err != nil {
		return nil, err
	}
	resp := &pb.HistoryListResponse{}
	for _, c := range h.List() {
		resp.Checkpoints = append(resp.Checkpoints, checkpointInfo(c))
	}
	if cur, ok := h.Current(); ok {
		resp.Current = cur.ID
	}
	if tx, ok := h.Tx(); ok {
		resp.Transaction = txInfo(tx)
	}
	resp.StoreBytes, resp.BudgetBytes = h.Usage()
	return resp, nil
}

func (s *historyService) Undo(context.Context, *pb.UndoRequest) (*pb.RestoreResponse, error) {
	return s.restore(EventUndo, (*history.History).Undo)
}

func (s *historyService) Redo(context.Context, *pb.RedoRequest) (*pb.RestoreResponse, error) {
	return s.restore(EventRedo, (*history.History).Redo)
}

func (s *historyService) Restore(_ context.Context, req *pb.RestoreRequest) (*pb.RestoreResponse, error) {
	id := req.GetCheckpoint()
	if id == "" {
		return nil, errdefs.ToGRPC(fmt.Errorf("checkpoint is required: name the checkpoint to restore: %w", errdefs.ErrInvalidArgument))
	}
	return s.restore(EventRestore, func(h *history.History) (history.Checkpoint, error) { return h.Restore(id) })
}

// restore runs a restore, then restarts the app on the restored files. Neither depends on
// the app's state: a crashed or crash-looping app is restarted all the same.
func (s *historyService) restore(name string, op func(*history.History) (history.Checkpoint, error)) (*pb.RestoreResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, err := s.open()
	if err != nil {
		return nil, err
	}
	c, err := op(h)
	if err != nil {
		return nil, errdefs.ToGRPC(err)
	}
	resp := &pb.RestoreResponse{Checkpoint: checkpointInfo(c)}
	if cur, ok := h.Current(); ok {
		resp.Current = cur.ID
	}
	s.publishRestore(name, c, resp.Current)
	resp.AppRestarted, resp.AppNote = s.restartApp()
	s.log.Info("workspace restored", "checkpoint", c.ID, "restores", c.Restores, "app_restarted", resp.AppRestarted)
	return resp, nil
}

// restartApp restarts the supervised app on files just rewritten, or says why it did not.
func (s *historyService) appRunning() bool {
	st, err := s.app.App()
	return err == nil && st.GetState() == appRunning
}

func (s *historyService) restartApp() (bool, string) {
	switch {
	case s.app != nil && s.hotReload && s.appRunning():
		// A restart would cost the page its state: the dev server's hot reload sends the
		// restored files to it instead.
		return false, "the app reloads changed files itself, so it was not restarted"
	case s.app != nil:
		s.app.Restart()
		return true, ""
	case s.hasMain:
		return false, "the main command is not supervised (restart is off), so it was not restarted"
	}
	return false, "this sandbox has no app to restart"
}

func (s *historyService) Begin(_ context.Context, req *pb.BeginRequest) (*pb.BeginResponse, error) {
	if err := checkMessage(req.GetMessage()); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h, err := s.open()
	if err != nil {
		return nil, err
	}
	before, _ := h.Current()
	tx, err := h.Begin(req.GetMessage())
	if err != nil {
		return nil, errdefs.ToGRPC(err)
	}
	if c, ok := h.Current(); ok && c.ID != before.ID { // changes found before it
		s.publishCheckpoint(c)
	}
	s.publishTx(EventBegin, tx, nil, false, tx.Base)
	s.log.Info("transaction begun", "tx", tx.ID, "base", tx.Base)
	return &pb.BeginResponse{Transaction: txInfo(tx)}, nil
}

func (s *historyService) Commit(context.Context, *pb.CommitRequest) (*pb.CommitResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, err := s.open()
	if err != nil {
		return nil, err
	}
	tx, _ := h.Tx()
	c, created, err := h.Commit()
	if err != nil {
		return nil, errdefs.ToGRPC(err)
	}
	s.publishTx(EventCommit, tx, &c, created, c.ID)
	s.log.Info("transaction committed", "tx", tx.ID, "checkpoint", c.ID, "created", created)
	return &pb.CommitResponse{Checkpoint: checkpointInfo(c), Created: created, Transaction: txInfo(tx)}, nil
}

// Rollback rewrites the workspace like a restore, so it restarts the app the same way.
func (s *historyService) Rollback(context.Context, *pb.RollbackRequest) (*pb.RollbackResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, err := s.open()
	if err != nil {
		return nil, err
	}
	tx, _ := h.Tx()
	c, err := h.Rollback()
	if err != nil {
		return nil, errdefs.ToGRPC(err)
	}
	resp := &pb.RollbackResponse{Transaction: txInfo(tx), Current: c.ID}
	s.publishTx(EventRollback, tx, nil, false, c.ID)
	resp.AppRestarted, resp.AppNote = s.restartApp()
	s.log.Info("transaction rolled back", "tx", tx.ID, "checkpoint", c.ID, "app_restarted", resp.AppRestarted)
	return resp, nil
}

// exportChunk is the size of the pieces an export travels in.
const exportChunk = 256 << 10

// Export streams the history. The lock is held throughout, so that the export is one
// state; checkpoints wait meanwhile.
func (s *historyService) Export(_ *pb.ExportRequest, stream grpc.ServerStreamingServer[pb.ExportChunk]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, err := s.open()
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(chunkWriter(func(p []byte) error {
		return stream.Send(&pb.ExportChunk{Data: p})
	}), exportChunk)
	if err := h.Export(w); err != nil {
		return errdefs.ToGRPC(err)
	}
	return errdefs.ToGRPC(w.Flush())
}

// chunkWriter sends what is written in messages of at most exportChunk bytes (a large
// write passes bufio.Writer whole), well under gRPC's message limit.
type chunkWriter func([]byte) error

func (f chunkWriter) Write(p []byte) (int, error) {
	for off := 0; off < len(p); off += exportChunk {
		if err := f(p[off:min(off+exportChunk, len(p))]); err != nil {
			return off, err
		}
	}
	return len(p), nil
}

// Import takes an export and restarts the app on the imported workspace.
func (s *historyService) Import(stream grpc.ClientStreamingServer[pb.ImportChunk, pb.RestoreResponse]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, err := s.open()
	if err != nil {
		return err
	}
	c, err := h.Import(&chunkReader{recv: stream.Recv})
	if err != nil {
		return errdefs.ToGRPC(err)
	}
	resp := &pb.RestoreResponse{Checkpoint: checkpointInfo(c), Current: c.ID}
	s.publishImport(c)
	resp.AppRestarted, resp.AppNote = s.restartApp()
	s.log.Info("history imported", "checkpoint", c.ID, "app_restarted", resp.AppRestarted)
	return stream.SendAndClose(resp)
}

// chunkReader reads an Import stream's chunks as one byte stream.
type chunkReader struct {
	recv func() (*pb.ImportChunk, error)
	buf  []byte
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		c, err := r.recv()
		if err != nil {
			return 0, err // io.EOF when the caller closed its side
		}
		r.buf = c.GetData()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func txInfo(tx history.Transaction) *pb.TransactionInfo {
	return &pb.TransactionInfo{Id: tx.ID, Message: tx.Message, Base: tx.Base, TimeUnixNano: tx.Time.UnixNano()}
}

func (s *historyService) Diff(_ context.Context, req *pb.DiffRequest) (*pb.DiffResponse, error) {
	to := req.GetTo()
	if to == "" {
		return nil, errdefs.ToGRPC(fmt.Errorf("to is required: name the checkpoint to compare: %w", errdefs.ErrInvalidArgument))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h, err := s.open()
	if err != nil {
		return nil, err
	}
	from := req.GetFrom()
	if from == "" {
		if from, err = parentOf(h, to); err != nil {
			return nil, errdefs.ToGRPC(err)
		}
	}
	d, err := h.Diff(from, to)
	if err != nil {
		return nil, errdefs.ToGRPC(err)
	}
	res := &pb.DiffResponse{Added: d.Added, Changed: d.Changed, Removed: d.Removed}
	if req.GetLines() {
		limit := int(req.GetMaxDiffBytes())
		if limit <= 0 || limit > maxDiffBytes {
			limit = maxDiffBytes
		}
		fds, err := h.FileDiffs(from, to, limit)
		if err != nil {
			return nil, errdefs.ToGRPC(err)
		}
		for _, fd := range fds {
			res.Files = append(res.Files, &pb.FileDiff{Path: fd.Path, Status: fd.Status, Binary: fd.Binary, Unified: fd.Unified, Truncated: fd.Truncated, Note: fd.Note})
		}
	}
	return res, nil
}

// maxDiffBytes bounds each file's line diff in a Diff answer (its messages are capped).
const maxDiffBytes = 64 << 10

func parentOf(h *history.History, id string) (string, error) {
	for _, c := range h.List() {
		if c.ID != id {
			continue
		}
		if c.Parent == "" {
			return "", fmt.Errorf("checkpoint %q is the first in the history: give from: %w", id, errdefs.ErrFailedPrecondition)
		}
		return c.Parent, nil
	}
	return "", fmt.Errorf("checkpoint %q: %w", id, errdefs.ErrNotFound)
}

func checkpointInfo(c history.Checkpoint) *pb.CheckpointInfo {
	return &pb.CheckpointInfo{Id: c.ID, Parent: c.Parent, TimeUnixNano: c.Time.UnixNano(), Cause: c.Cause,
		Message: c.Message, Changed: uint32(c.Changed), Restores: c.Restores, Transaction: c.Transaction,
		Compacted: uint32(c.Compacted), Tree: c.Tree}
}

// recordedFiles is the Files service with a checkpoint (cause "agent-write") after every
// call that changed the workspace. The checkpoint is taken before the answer is sent, so
// that a caller who reads the history next finds it; it runs as the agent, outside the
// sandbox user's identity the file operation ran with, since the store is not the user's.
type recordedFiles struct {
	*files.Service
	hist *historyService
}

// heldWrite keeps Write's answer until the checkpoint is taken.
type heldWrite struct {
	grpc.ClientStreamingServer[pb.WriteRequest, pb.FileInfo]
	info *pb.FileInfo
}

func (w *heldWrite) SendAndClose(info *pb.FileInfo) error {
	w.info = info
	return nil
}

func (f *recordedFiles) Write(stream grpc.ClientStreamingServer[pb.WriteRequest, pb.FileInfo]) error {
	f.hist.afterFirst(stream.Context())
	held := &heldWrite{ClientStreamingServer: stream}
	if err := f.Service.Write(held); err != nil {
		return err
	}
	if held.info == nil {
		return errdefs.ToGRPC(errors.New("write: no answer"))
	}
	f.hist.record(history.CauseAgentWrite, "write "+held.info.GetPath())
	return stream.SendAndClose(held.info)
}

func (f *recordedFiles) Mkdir(ctx context.Context, req *pb.MkdirRequest) (*pb.FileInfo, error) {
	f.hist.afterFirst(ctx)
	info, err := f.Service.Mkdir(ctx, req)
	if err == nil {
		f.hist.record(history.CauseAgentWrite, "mkdir "+info.GetPath())
	}
	return info, err
}

func (f *recordedFiles) Move(ctx context.Context, req *pb.MoveRequest) (*pb.FileInfo, error) {
	f.hist.afterFirst(ctx)
	info, err := f.Service.Move(ctx, req)
	if err == nil {
		f.hist.record(history.CauseAgentWrite, "move "+req.GetFrom()+" to "+info.GetPath())
	}
	return info, err
}

func (f *recordedFiles) Remove(ctx context.Context, req *pb.RemoveRequest) (*pb.RemoveResponse, error) {
	f.hist.afterFirst(ctx)
	resp, err := f.Service.Remove(ctx, req)
	if err == nil {
		f.hist.record(history.CauseAgentWrite, "remove "+req.GetPath())
	}
	return resp, err
}

// execMessage describes a command for its checkpoint by its program alone, as the control
// plane's audit log does: its arguments may carry a token, and the timeline is shown to
// whoever reads the history.
func execMessage(argv []string) string {
	if len(argv) == 0 {
		return "exec"
	}
	return "exec: " + argv[0]
}

// Bounds of Objects and ReadObjects messages.
const (
	objectsPerMessage = 2048
	// MaxReadObjects bounds the blobs one ReadObjects names.
	MaxReadObjects = 4096
)

// Objects lists the store: its index, then its blobs a bounded number a message.
func (s *historyService) Objects(_ *pb.ObjectsRequest, stream grpc.ServerStreamingServer[pb.ObjectsChunk]) error {
	h, err := s.open()
	if err != nil {
		return err
	}
	index, blobs, err := h.Objects()
	if err != nil {
		return errdefs.ToGRPC(err)
	}
	msg := &pb.ObjectsChunk{Index: index}
	for i, b := range blobs {
		msg.Blobs = append(msg.Blobs, &pb.BlobRef{Sum: b.Sum, Size: b.Size})
		if len(msg.Blobs) == objectsPerMessage || i == len(blobs)-1 {
			if err := stream.Send(msg); err != nil {
				return err
			}
			msg = &pb.ObjectsChunk{}
		}
	}
	if len(blobs) == 0 {
		return stream.Send(msg)
	}
	return nil
}

// ReadObjects streams the blobs named, as stored, in chunks of at most exportChunk bytes.
func (s *historyService) ReadObjects(req *pb.ReadObjectsRequest, stream grpc.ServerStreamingServer[pb.ObjectChunk]) error {
	h, err := s.open()
	if err != nil {
		return err
	}
	if n := len(req.GetSums()); n > MaxReadObjects {
		return errdefs.ToGRPC(fmt.Errorf("read objects: %d blobs named, over %d: %w", n, MaxReadObjects, errdefs.ErrInvalidArgument))
	}
	buf := make([]byte, exportChunk)
	for _, sum := range req.GetSums() {
		if err := sendObject(h, sum, buf, stream); err != nil {
			return errdefs.ToGRPC(err)
		}
	}
	return nil
}

// sendObject sends blob sum: its size as stat gave it, then exactly that many bytes.
func sendObject(h *history.History, sum string, buf []byte, stream grpc.ServerStreamingServer[pb.ObjectChunk]) error {
	f, size, err := h.OpenObject(sum)
	if err != nil {
		return err
	}
	defer f.Close()
	msg := &pb.ObjectChunk{Sum: sum, Size: size}
	left := size
	for first := true; first || left > 0; first = false {
		n, err := io.ReadFull(f, buf[:min(int64(len(buf)), left)])
		if err != nil && n == 0 && left > 0 {
			return fmt.Errorf("read blob %s: it changed size while read: %w", sum, errdefs.ErrDataLoss)
		}
		left -= int64(n)
		msg.Data = buf[:n]
		if err := stream.Send(msg); err != nil {
			return err
		}
		msg = &pb.ObjectChunk{}
	}
	return nil
}
