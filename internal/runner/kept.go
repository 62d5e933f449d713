package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/sandbox/container"
	"github.com/paddockhq/paddock/internal/wire"
)

// Kept is a one-shot sandbox still on this host after its run: one that `paddock run
// --keep` kept, or whose CLI was killed before it could remove it.
type Kept struct {
	ID string
	// Running says that the sandbox's first process (its agent) is alive.
	Running bool
	// Workspace is its temporary workspace on the host; empty when the run was given
	// --workspace (the user's own directory, not recorded) or it is gone.
	Workspace string
}

// keptDir is where user's one-shot sandboxes keep their workspaces (and mount their
// disks): a sandbox is one of theirs if it has a directory there.
func (r *Runner) keptDir(user string) string {
	return filepath.Join(r.cfg.WorkspaceRoot, user, "tmp")
}

// runOwnerFile, in a one-shot sandbox's state directory, names the `paddock run` process
// running it, as "PID STARTTIME" (the start time tells a reused pid apart). A sandbox whose
// run is alive is not left: it is neither listed nor removed.
const runOwnerFile = "run.owner"

// claimRun records this process as the run of sandbox id. Without the record a live run
// could be removed under it, so a failure is logged.
func (r *Runner) claimRun(id string) {
	if r.cfg.OnCluster() {
		return // a cluster's one-shot pod ends with its run
	}
	start, err := procStart(os.Getpid())
	if err == nil {
		err = os.WriteFile(filepath.Join(r.stateDir(id), runOwnerFile), fmt.Appendf(nil, "%d %s\n", os.Getpid(), start), 0o600)
	}
	if err != nil {
		r.log.Warn("the sandbox's run is not recorded: paddock kept may list it while it runs", "sandbox", id, "err", err)
	}
}

// releaseRun leaves sandbox id kept: no run owns it any longer.
func (r *Runner) releaseRun(id string) {
	_ = os.Remove(filepath.Join(r.stateDir(id), runOwnerFile))
}

// runOf is the pid of the live `paddock run` of sandbox id, or 0.
func (r *Runner) runOf(id string) int {
	data, err := os.ReadFile(filepath.Join(r.stateDir(id), runOwnerFile))
	if err != nil {
		return 0
	}
	var pid int
	var start string
	if _, err := fmt.Sscanf(string(data), "%d %s", &pid, &start); err != nil || pid <= 0 {
		return 0
	}
	if now, err := procStart(pid); err != nil || now != start {
		return 0
	}
	return pid
}

// procStart is process pid's start time, in clock ticks after boot.
func procStart(pid int) (string, error) {
	f, err := container.ProcStat(pid)
	if err != nil {
		return "", err
	}
	return f[19], nil
}

// ListKept lists user's one-shot sandboxes left on this host, by ID.
func (r *Runner) ListKept(user string) ([]Kept, error) {
	if !validUser(user) {
		return nil, invalidUser(user)
	}
	entries, err := os.ReadDir(r.keptDir(user))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kept sandboxes of %s: %w", user, err)
	}
	var kept []Kept
	for _, e := range entries {
		if !e.IsDir() || !ValidID(e.Name()) || r.runOf(e.Name()) != 0 {
			continue
		}
		kept = append(kept, r.kept(user, e.Name()))
	}
	slices.SortFunc(kept, func(a, b Kept) int { return strings.Compare(a.ID, b.ID) })
	return kept, nil
}

func (r *Runner) kept(user, id string) Kept {
	k := Kept{ID: id}
	k.Running = container.Running(r.stateDir(id))
	ws := filepath.Join(r.keptDir(user), id)
	if _, err := os.Stat(r.diskImage(user, id)); err == nil {
		// On a disk of its own, the workspace is the disk's workspace/: none when the run
		// was given --workspace (the disk then holds only /tmp).
		ws = filepath.Join(ws, "workspace")
	}
	if fi, err := os.Stat(ws); err == nil && fi.IsDir() {
		k.Workspace = ws
	}
	return k
}

// RemoveKept removes user's one-shot sandbox id that is still on this host: its
// processes, runtime record, cgroup and state (as Reap does), then its disk image and its
// temporary workspace. A workspace given with --workspace is the user's and stays. Only
// one-shot sandboxes are removed here: a persistent sandbox is its control plane's.
func (r *Runner) RemoveKept(ctx context.Context, user, id string) error {
	if !ValidID(id) {
		return invalidID(id)
	}
	if !validUser(user) {
		return invalidUser(user)
	}
	dir := filepath.Join(r.keptDir(user), id)
	if _, err := os.Lstat(dir); err != nil {
		return fmt.Errorf("sandbox %s: paddock run left no sandbox of that ID for user %s on this host (%s: %w): %w", id, user, dir, unwrapPath(err), errdefs.ErrNotFound)
	}
	if pid := r.runOf(id); pid != 0 {
		return fmt.Errorf("sandbox %s: paddock run (pid %d) is still running it; end that run first: %w", id, pid, errdefs.ErrFailedPrecondition)
	}
	// Whichever runtime ran it: each keeps its own records.
	rec := Record{ID: id, Tier: wire.TierContainer}
	for _, name := range []string{"runc", "runsc"} {
		if rt, err := r.containerRuntime(name); err == nil && rt.Knows(ctx, id) {
			rec.Runtime = name
			break
		}
	}
	errs := []error{r.Reap(ctx, rec)}
	img := r.diskImage(user, id)
	if _, err := os.Stat(img); err == nil {
		d := &disk{image: img, mount: dir, remove: true}
		errs = append(errs, d.release())
	}
	errs = append(errs, os.RemoveAll(dir))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sandbox %s: %w", id, err)
	}
	return nil
}

// unwrapPath is err without its *PathError, whose path the caller already names.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
