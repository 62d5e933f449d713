package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/wire"
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
	return f.forkFrom(ctx, c, src, f.HistoryDir(src), at, name, true)
}

// HistoryDir is where sandbox sb's history store is kept.
func (f *Fleet) HistoryDir(sb store.Sandbox) string {
	return f.run.HistoryDir(runnerUser(sb.Username), sb.ID)
}

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
	rec := src
	rec.ID = runner.NewID()
	rec.State, rec.Error = api.StateCreating, ""
	rec.CreatedAt, rec.UpdatedAt = f.now(), f.now()
	rec.Name = name
	if rec.Name == "" {
		rec.Name = forkName(src.Name, rec.ID)
	}
	if err := checkName(rec.Name); err != nil {
		return Forked{}, err
	}
	err = f.st.Update(ctx, func(tx *store.Tx) error {
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
	if err != nil {
		return Forked{}, err
	}
	out := Forked{}
	spec := f.spec(rec)
	if withDisk {
		spec.DiskFrom = src.ID
	}
	spec.Seed = func(s runner.Seeding) error {
		began := time.Now()
		mode := runner.ForkFiles
		if s.Copied {
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

// forkName is a fork's default name: its source's, marked, within the names' bound.
func forkName(src, id string) string {
	suffix := "-fork-" + id[3:8]
	if len(src)+len(suffix) > maxNameLen {
		src = src[:maxNameLen-len(suffix)]
	}
	return src + suffix
}
