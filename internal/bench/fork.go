package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/paddockhq/paddock/internal/agent/history"
)

// ForkTable compares forking a workspace's history (history.Fork, what `paddock sandbox
// fork` does before the new sandbox starts) with `cp -a` of the same workspace: table
// 10's 10,000 files.
func (e *Env) ForkTable(ctx context.Context, o Options) (t *Table, err error) {
	spec := benchWorkspace
	if o.Quick {
		spec = quickWorkspace
	}
	dir, err := os.MkdirTemp(e.Dir, "fork-")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	ws, store := filepath.Join(dir, "ws"), filepath.Join(dir, "store")
	plan := spec.plan()
	if err := plan.write(ws); err != nil {
		return nil, fmt.Errorf("generate workspace: %w", err)
	}
	h, err := history.Open(ws, store)
	if err != nil {
		return nil, err
	}
	if _, _, err := h.Checkpoint(history.CauseManual, "initial"); err != nil {
		h.Close()
		return nil, err
	}
	rec := newRecorder()
	var info history.ForkInfo
	round := 0
	fork := func() error {
		round++
		dst, to := filepath.Join(dir, fmt.Sprint("fork-store-", round)), filepath.Join(dir, fmt.Sprint("fork-ws-", round))
		if err := os.Mkdir(to, 0o755); err != nil {
			return err
		}
		syscall.Sync()
		began := time.Now()
		info, err = history.Fork(store, dst, "", to)
		rec.add("fork", ms(time.Since(began)))
		rec.add("share", ms(info.Shared))
		return errors.Join(err, os.RemoveAll(dst), os.RemoveAll(to))
	}
	cp := func() error {
		round++
		to := filepath.Join(dir, fmt.Sprint("cp-", round))
		syscall.Sync()
		began := time.Now()
		out, err := exec.CommandContext(ctx, "cp", "-a", ws, to).CombinedOutput()
		rec.add("cp", ms(time.Since(began)))
		if err != nil {
			return fmt.Errorf("cp -a: %v: %s", err, out)
		}
		return os.RemoveAll(to)
	}
	err = interleave(rec, 1, min(o.N, 5), fork, cp)
	h.Close()
	if err != nil {
		return nil, err
	}
	f, s, c := rec.summary("fork"), rec.summary("share"), rec.summary("cp")
	return &Table{
		Title: "17. Fork of a workspace's history against `cp -a` of the workspace",
		About: fmt.Sprintf("Table 10's generated workspace (%s files, %s) with one checkpoint, on the harness's disk. The fork is "+
			"`history.Fork` from that checkpoint into a new store and an empty workspace, which `paddock sandbox fork` runs before "+
			"the new sandbox starts: the store's blobs are shared (FICLONE where the file system has reflinks, else hard links), "+
			"the index copied, and the checkpoint's files written into the new workspace as a restore writes them, made durable "+
			"with one syncfs. The baseline is `cp -a` of the workspace, not synced. Both after a sync, untimed; interleaved.",
			grouped(plan.files()), sizeText(plan)),
		Rows: []Row{
			{Name: "fork (share the history, write the files)", Unit: "ms", Summary: f, Ratio: ratio(f.P50, c.P50), Target: "≤ 0.1× cp -a", Met: yesNo(f.P50 <= 0.1*c.P50)},
			{Name: "of which sharing the history's blobs", Unit: "ms", Summary: s, Ratio: ratio(s.P50, c.P50)},
			{Name: "`cp -a` of the workspace", Unit: "ms", Summary: c, Ratio: "1.00× (baseline)"},
		},
		Notes: []string{
			fmt.Sprintf("Blobs shared: %d by reflink, %d by hard link. The workspace's files must be the fork's own (never links to "+
				"files its source can still write), so where the file system has no reflinks (ext4, as here; and a sandbox's "+
				"workspace is on a disk image of its own) every byte of them is written again, as `cp -a` writes it: the "+
				"target is met only by sharing the history, which costs what a hard link costs per blob.", info.Cloned, info.Linked),
		},
	}, nil
}

// sizeText is the generated workspace's size, in MB.
func sizeText(p genPlan) string {
	var n int64
	for _, f := range p.Files {
		n += int64(f.Size)
	}
	return fmt.Sprintf("%d MB", n/1_000_000)
}
