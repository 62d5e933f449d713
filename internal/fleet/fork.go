package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// Forked is what Fork made.
type Forked struct {
	Sandbox store.Sandbox
	// History says which checkpoint the fork starts from, and which transaction of the
	// source's it left out.
	History wire.ForkInfo
	Took    time.Duration
	// CopiedDisk: the workspace started as a copy of the source's disk image.
	CopiedDisk bool
}

// Fork makes a new sandbox of c's, like sandbox id (tier, runtime, limits, environment,
// app), whose workspace and history start from checkpoint at of id's history ("": its
// current checkpoint, or with a transaction open the state before it), and starts it. A
// checkpoint that does not exist is not found, by name, before anything is made.
func (f *Fleet) Fork(ctx context.Context, c Caller, id, at, name string) (Forked, error) {
	src, err := f.Get(ctx, c, id)
	if err != nil {
		return Forked{}, err
	}
	if !f.run.HistoryOnHost() {
		return f.forkThroughAgent(ctx, c, src, at, name)
	}
	return f.forkFrom(ctx, c, src, f.HistoryDir(src), at, name, true)
}

// HistoryDir is where sandbox sb's history store is kept.
func (f *Fleet) HistoryDir(sb store.Sandbox) string {
	return f.run.HistoryDir(runnerUser(sb.Username), sb.ID)
}

// HistoryOnHost says whether sandboxes' history stores are read on this host (at
// HistoryDir), or only through their agents (on a cluster).
func (f *Fleet) HistoryOnHost() bool { return f.run.HistoryOnHost() }

// Checkpoint finds checkpoint at ("": the current one) of the history store at dir,
// through the agent's binary (see runner.ForkHistory).
func (f *Fleet) Checkpoint(ctx context.Context, dir, at string) (wire.ForkInfo, error) {
	return f.run.ForkHistory(ctx, dir, "", at, "", 0, 0, runner.ForkCheck)
}

// ExportHistory streams the history store at dir as an export.
func (f *Fleet) ExportHistory(ctx context.Context, dir string) (io.ReadCloser, error) {
	return f.run.ExportHistory(ctx, dir)
}

// ForkFrom is Fork from the history store at srcDir (sandbox src's, or one restored
// from its backup): the new sandbox is like src and starts from checkpoint at of srcDir.
// Each of also runs in the transaction that records the new sandbox, before it starts.
// Where the new sandbox's store is not on this host (a cluster's), srcDir goes to it
// through its agent, as an export.
func (f *Fleet) ForkFrom(ctx context.Context, c Caller, src store.Sandbox, srcDir, at, name string, also ...func(*store.Tx, store.Sandbox) error) (Forked, error) {
	return f.forkFrom(ctx, c, src, srcDir, at, name, false, also...)
}

// forkFrom is ForkFrom; withDisk starts the new sandbox's disk as a copy of src's image,
// where both have one (runner.Spec.DiskFrom), and restores the checkpoint over it; else
// the checkpoint's files are written into an empty workspace.
func (f *Fleet) forkFrom(ctx context.Context, c Caller, src store.Sandbox, srcDir, at, name string, withDisk bool, also ...func(*store.Tx, store.Sandbox) error) (Forked, error) {
	id := src.ID
	cp, err := f.run.ForkHistory(ctx, srcDir, "", at, "", 0, 0, runner.ForkCheck)
	if err != nil {
		return Forked{}, fmt.Errorf("fork of sandbox %s: %w", id, err)
	}
	if !f.run.HistoryOnHost() {
		export := func(ctx context.Context) (io.ReadCloser, error) { return f.run.ExportHistory(ctx, srcDir) }
		return f.forkInto(ctx, c, src, cp, name, export, also...)
	}
	rec, err := f.recordFork(ctx, c, src, cp, name, also...)
	if err != nil {
		return Forked{}, err
	}
	out := Forked{}
	spec := f.spec(rec)
	if withDisk {
		spec.DiskFrom = src.ID
		// Beside the copy, while the source is frozen: is it the checkpoint already?
		spec.ProveCopy = func(ws string) bool {
			info, err := f.run.ForkHistory(ctx, srcDir, "", cp.At, ws, 0, 0, runner.ForkProve)
			if err != nil || !info.Proven {
				f.log.Info("fork: the copy is restored over, not proven to be the checkpoint", "sandbox", src.ID, "checkpoint", cp.At, "why", info.NotProven, "err", err)
			}
			return err == nil && info.Proven
		}
	}
	spec.Seed = func(s runner.Seeding) error {
		began := time.Now()
		mode := runner.ForkFiles
		switch {
		case s.Copied && s.Proven:
			mode = runner.ForkOverProvenCopy
		case s.Copied:
			mode = runner.ForkOverCopy
		}
		info, err := f.run.ForkHistory(ctx, srcDir, s.History, cp.At, s.Workspace, s.UID, s.GID, mode)
		out.History, out.Took, out.CopiedDisk = info, time.Since(began), s.Copied
		return err
	}
	unlock := f.lock(rec.ID)
	rec, err = f.startSpec(ctx, c, rec, spec)
	unlock()
	out.Sandbox = rec
	if err != nil {
		// Half a fork is of no use: it goes, with what was made of it.
		return out, errors.Join(fmt.Errorf("fork of sandbox %s: %w", id, err), f.Delete(context.WithoutCancel(ctx), c, rec.ID))
	}
	return out, nil
}

// recordFork records the fork of src at checkpoint cp, named name ("": src's, marked).
func (f *Fleet) recordFork(ctx context.Context, c Caller, src store.Sandbox, cp wire.ForkInfo, name string, also ...func(*store.Tx, store.Sandbox) error) (store.Sandbox, error) {
	rec := src
	rec.ID = runner.NewID()
	rec.State, rec.Error = api.StateCreating, ""
	rec.CreatedAt, rec.UpdatedAt = f.now(), f.now()
	rec.Name = name
	if rec.Name == "" {
		rec.Name = forkName(src.Name, rec.ID)
	}
	if err := checkName(rec.Name); err != nil {
		return rec, err
	}
	err := f.st.Update(ctx, func(tx *store.Tx) error {
		if err := f.checkQuota(ctx, tx, c, rec); err != nil {
			return err
		}
		if err := tx.CreateSandbox(ctx, rec); err != nil {
			return err
		}
		for _, fn := range also {
			if err := fn(tx, rec); err != nil {
				return err
			}
		}
		return tx.AppendAudit(ctx, f.event(c, "sandbox.fork", rec.ID, map[string]any{"name": rec.Name, "from": src.ID, "checkpoint": cp.At}))
	})
	return rec, err
}

// forkThroughAgent is Fork of a sandbox whose store is reached only through its agent: it
// must run, and have no transaction open (its agent exports none then).
func (f *Fleet) forkThroughAgent(ctx context.Context, c Caller, src store.Sandbox, at, name string) (Forked, error) {
	hc, err := f.Agent(ctx, c, src.ID)
	if err != nil {
		return Forked{}, fmt.Errorf("fork of sandbox %s (its history is read through its agent): %w", src.ID, err)
	}
	list, err := hc.HistoryList(ctx)
	if err != nil {
		return Forked{}, fmt.Errorf("fork of sandbox %s: %w", src.ID, err)
	}
	if tx := list.GetTransaction(); tx != nil {
		return Forked{}, fmt.Errorf("fork of sandbox %s: transaction %s is open, and its history is copied through its agent, which exports none then: commit or roll it back first: %w", src.ID, tx.GetId(), errdefs.ErrFailedPrecondition)
	}
	cp := wire.ForkInfo{At: at}
	if at == "" {
		cp.At = list.GetCurrent()
	}
	found := false
	for _, x := range list.GetCheckpoints() {
		found = found || x.GetId() == cp.At
	}
	switch {
	case cp.At == "":
		return Forked{}, fmt.Errorf("fork of sandbox %s: the history has no checkpoint yet: %w", src.ID, errdefs.ErrFailedPrecondition)
	case !found:
		return Forked{}, fmt.Errorf("fork of sandbox %s: checkpoint %q: %w", src.ID, at, errdefs.ErrNotFound)
	}
	export := func(ctx context.Context) (io.ReadCloser, error) {
		s, err := hc.Export(ctx)
		if err != nil {
			return nil, err
		}
		return io.NopCloser(&chunkReader{next: func() ([]byte, error) { m, err := s.Recv(); return m.GetData(), err }}), nil
	}
	return f.forkInto(ctx, c, src, cp, name, export)
}

// forkInto is a fork whose new sandbox starts with an empty history, into which export
// is imported through its agent; checkpoint cp.At is then restored where the export's
// current checkpoint is another.
func (f *Fleet) forkInto(ctx context.Context, c Caller, src store.Sandbox, cp wire.ForkInfo, name string, export func(context.Context) (io.ReadCloser, error), also ...func(*store.Tx, store.Sandbox) error) (Forked, error) {
	rec, err := f.recordFork(ctx, c, src, cp, name, also...)
	if err != nil {
		return Forked{}, err
	}
	unlock := f.lock(rec.ID)
	rec, err = f.startSpec(ctx, c, rec, f.spec(rec))
	unlock()
	out := Forked{Sandbox: rec, History: cp}
	if err == nil {
		began := time.Now()
		err = f.fill(ctx, rec.ID, cp.At, export)
		out.Took = time.Since(began)
	}
	if err != nil {
		return out, errors.Join(fmt.Errorf("fork of sandbox %s: %w", src.ID, err), f.Delete(context.WithoutCancel(ctx), c, rec.ID))
	}
	return out, nil
}

// fill imports export into running sandbox id's empty history, then restores checkpoint
// at unless the import left the workspace there.
func (f *Fleet) fill(ctx context.Context, id, at string, export func(context.Context) (io.ReadCloser, error)) error {
	f.mu.Lock()
	h := f.running[id]
	f.mu.Unlock()
	if h == nil {
		return fmt.Errorf("sandbox %s stopped before its history was written: %w", id, errdefs.ErrUnavailable)
	}
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	rd, err := export(ictx)
	if err != nil {
		return fmt.Errorf("export the history: %w", err)
	}
	defer rd.Close()
	hc := h.Agent()
	up, err := hc.Import(ictx)
	if err != nil {
		return fmt.Errorf("import the history: %w", err)
	}
	buf := make([]byte, 256<<10)
	for {
		n, rerr := rd.Read(buf)
		if n > 0 {
			if err := up.Send(&pb.ImportChunk{Data: buf[:n]}); err != nil {
				break // the agent refused: CloseAndRecv has its reason
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return fmt.Errorf("export the history: %w", rerr)
		}
	}
	res, err := up.CloseAndRecv()
	if err != nil {
		return fmt.Errorf("import the history: %w", err)
	}
	if res.GetCurrent() == at {
		return nil
	}
	if _, err := hc.Restore(ctx, at); err != nil {
		return fmt.Errorf("restore checkpoint %s: %w", at, err)
	}
	return nil
}

// chunkReader reads a stream of chunks as one byte stream.
type chunkReader struct {
	next func() ([]byte, error)
	buf  []byte
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		b, err := r.next()
		if err != nil {
			return 0, err
		}
		r.buf = b
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// forkName is a fork's default name: its source's, marked, within the names' bound.
func forkName(src, id string) string {
	suffix := "-fork-" + id[3:8]
	if len(src)+len(suffix) > maxNameLen {
		src = src[:maxNameLen-len(suffix)]
	}
	return src + suffix
}
