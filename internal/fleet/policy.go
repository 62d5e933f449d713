package fleet

import (
	"context"
	"fmt"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/wire"
)

// ApplyLimits records l as sandbox id's memory, CPU, pids, tmp, file size and disk limits (a
// zero field keeps the sandbox's own), within the user's memory quota, and runs also in
// the same transaction, so that a policy and the limits it sets are attached together or
// not at all. The limits are the runner's from the sandbox's next start: a running
// sandbox keeps the cgroup, /tmp and file size limit it was made with until it is
// restarted.
func (f *Fleet) ApplyLimits(ctx context.Context, c Caller, id string, l wire.Limits, also func(tx *store.Tx) error) (store.Sandbox, error) {
	rec, unlock, err := f.acquire(ctx, c, id)
	if err != nil {
		return rec, err
	}
	defer unlock()
	next := rec
	if l.Memory > 0 {
		next.MemoryBytes = int64(l.Memory)
	}
	if l.CPUs > 0 {
		next.CPUs = l.CPUs
	}
	if l.Pids > 0 {
		next.Pids = l.Pids
	}
	if l.Tmp > 0 {
		next.TmpBytes = int64(l.Tmp)
	}
	if l.FileSize > 0 {
		next.FileSizeBytes = int64(l.FileSize)
	}
	if l.Disk > 0 {
		next.DiskBytes = int64(l.Disk)
	}
	if err := limitsOf(next).Validate("resources."); err != nil {
		return rec, err
	}
	changed := limitsOf(next) != limitsOf(rec)
	err = f.st.Update(ctx, func(tx *store.Tx) error {
		if changed {
			u, err := tx.UserUsage(ctx, rec.UserID)
			if err != nil {
				return err
			}
			if total := u.MemoryBytes - rec.MemoryBytes + next.MemoryBytes; total > int64(f.cfg.Quota.Memory) {
				return fmt.Errorf("quota: with resources.memory %s, %s's sandboxes would take %s of memory, over the %s allowed: %w",
					wire.Size(next.MemoryBytes), rec.Username, wire.Size(total), f.cfg.Quota.Memory, errdefs.ErrLimitExceeded)
			}
			if err := tx.SetSandboxLimits(ctx, next, f.now()); err != nil {
				return err
			}
			if err := tx.AppendAudit(ctx, f.event(c, "sandbox.limits", id, map[string]any{
				"memory_bytes": next.MemoryBytes, "cpus": next.CPUs, "pids": next.Pids,
				"tmp_bytes": next.TmpBytes, "file_size_bytes": next.FileSizeBytes, "disk_bytes": next.DiskBytes})); err != nil {
				return err
			}
		}
		return also(tx)
	})
	if err != nil {
		return rec, err
	}
	return next, nil
}
