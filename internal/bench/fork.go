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

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/agent/history"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/testenv/xfs"
	"github.com/paddockhq/paddock/internal/wire"
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
	img, err := e.diskForkSource(dir, plan, o.Quick)
	if err != nil {
		h.Close()
		return nil, err
	}
	defer img.close()
	// The same disk fork where the workspace root is on a file system with reflinks: an XFS
	// made in a sparse file on the harness's disk and loop-mounted, holding a second source
	// (its image and history store) and a plain copy of the workspace for `cp -a`, which
	// clones each file there (coreutils' default, --reflink=auto).
	xfs, err := makeReflinkFS(ctx, dir, 8<<30)
	if err != nil {
		h.Close()
		return nil, err
	}
	defer xfs.close()
	var xsrc *diskSource
	xws := filepath.Join(xfs.root, "ws")
	if xfs.missing == "" {
		if xsrc, err = e.diskForkSource(xfs.root, plan, o.Quick); err != nil {
			h.Close()
			return nil, err
		}
		defer xsrc.close()
		if err := plan.write(xws); err != nil {
			h.Close()
			return nil, fmt.Errorf("generate the workspace on XFS: %w", err)
		}
	}
	rec := newRecorder()
	var info history.ForkInfo
	round := 0
	// The fork paddock makes of a sandbox with a disk image (src's, forked under base): the
	// image copied sparsely while frozen, mounted, and the checkpoint restored over the
	// copy. With prove, the frozen source is proven to be the checkpoint beside the copy
	// (history.ProveFrozen), and the restore is recorded without walking the copy; without,
	// the copy is walked, as for a source that changed since its checkpoint. Its series are
	// named fs (disk: the harness's disk; xfs: the file system with reflinks) and the kind.
	infos := map[string]history.ForkInfo{} // each file system's last fork
	dchecked := map[string]bool{}
	proofs := map[string]int{}
	disk := func(src *diskSource, base, fs string, prove bool) error {
		round++
		to, mnt, dst := filepath.Join(base, fmt.Sprint("disk-", round, ".img")), filepath.Join(base, fmt.Sprint("disk-mnt-", round)), filepath.Join(base, fmt.Sprint("disk-store-", round))
		if err := os.Mkdir(mnt, 0o700); err != nil {
			return err
		}
		var proof func(string) bool
		key := fs + ".walk"
		if prove {
			key = fs + ".proven"
			proof = func(ws string) bool {
				began := time.Now()
				ok, err := history.ProveFrozen(src.store, "", ws)
				rec.add(fs+".proof", ms(time.Since(began)))
				return ok && err == nil
			}
		}
		syscall.Sync()
		began := time.Now()
		proven, err := runner.CopyImage(src.image, src.mount, to, proof)
		copied := time.Now()
		if err == nil {
			err = runner.MountImage(to, mnt)
		}
		var info history.ForkInfo
		if err == nil && proven {
			if rec.on {
				proofs[fs]++
			}
			info, err = history.ForkOverProvenCopy(src.store, dst, "", filepath.Join(mnt, "workspace"))
		} else if err == nil {
			info, err = history.ForkOverCopy(src.store, dst, "", filepath.Join(mnt, "workspace"))
		}
		done := time.Now()
		rec.add(key, ms(done.Sub(began)))
		rec.add(key+".copy", ms(copied.Sub(began)))
		rec.add(key+".share", ms(info.Shared))
		rec.add(key+".restore", ms(done.Sub(copied)-info.Shared))
		infos[fs] = info
		if err == nil && !dchecked[key] {
			dchecked[key] = true
			err = checkDiskFork(ctx, filepath.Join(mnt, "workspace"), src.workspace())
		}
		if err == nil && prove {
			err = checkProvenFork(dst, filepath.Join(mnt, "workspace"))
		}
		return errors.Join(err, unmountAt(mnt), os.Remove(to), os.RemoveAll(dst), os.Remove(mnt))
	}
	proven := func() error { return disk(img, dir, "disk", true) }
	walked := func() error { return disk(img, dir, "disk", false) }
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
	// The layered fork: the blobs shared as above and the checkpoint's tree written as
	// overlay metadata over them; the first one is mounted and read back, untimed.
	var linfo history.LayerInfo
	checked := false
	layer := func() error {
		round++
		dst, meta := filepath.Join(dir, fmt.Sprint("layer-store-", round)), filepath.Join(dir, fmt.Sprint("layer-meta-", round))
		syscall.Sync()
		began := time.Now()
		linfo, err = history.ForkLayer(store, dst, "", meta, os.Getuid(), os.Getgid())
		rec.add("layer", ms(time.Since(began)))
		if err == nil {
			synced := time.Now()
			err = syncDir(meta)
			rec.add("layer.sync", ms(time.Since(synced)))
		}
		if err == nil && !checked {
			checked = true
			err = checkLayer(ctx, dir, meta, filepath.Join(dst, "objects"), ws)
		}
		return errors.Join(err, os.RemoveAll(dst), os.RemoveAll(meta))
	}
	// The floor of any copy of the workspace's bytes (a disk image's, copied sparsely):
	// one file of the workspace's size, copied in the kernel.
	big := filepath.Join(dir, "one-file")
	if err := writeOneFile(big, plan); err != nil {
		h.Close()
		return nil, err
	}
	one := func() error {
		round++
		to := filepath.Join(dir, fmt.Sprint("one-", round))
		syscall.Sync()
		began := time.Now()
		out, err := exec.CommandContext(ctx, "cp", "--sparse=always", big, to).CombinedOutput()
		rec.add("one", ms(time.Since(began)))
		if err != nil {
			return fmt.Errorf("cp: %v: %s", err, out)
		}
		return os.Remove(to)
	}
	// cpA is `cp -a` of from into base, recorded as key.
	cpA := func(from, base, key string) func() error {
		return func() error {
			round++
			to := filepath.Join(base, fmt.Sprint("cp-", round))
			syscall.Sync()
			began := time.Now()
			out, err := exec.CommandContext(ctx, "cp", "-a", from, to).CombinedOutput()
			rec.add(key, ms(time.Since(began)))
			if err != nil {
				return fmt.Errorf("cp -a into %s: %v: %s", base, err, out)
			}
			return os.RemoveAll(to)
		}
	}
	rounds := []func() error{proven, walked, fork, layer, one, cpA(ws, dir, "cp")}
	if xfs.missing == "" {
		xproven := func() error { return disk(xsrc, xfs.root, "xfs", true) }
		rounds = append(rounds, xproven, cpA(xws, xfs.root, "xfs.cp"))
	}
	err = interleave(rec, 1, min(o.N, 5), rounds...)
	h.Close()
	if err != nil {
		return nil, err
	}
	f, s, c := rec.summary("fork"), rec.summary("share"), rec.summary("cp")
	d, dc, ds, dr, dp := rec.summary("disk.proven"), rec.summary("disk.proven.copy"), rec.summary("disk.proven.share"), rec.summary("disk.proven.restore"), rec.summary("disk.proof")
	w, wc, ws2, wr := rec.summary("disk.walk"), rec.summary("disk.walk.copy"), rec.summary("disk.walk.share"), rec.summary("disk.walk.restore")
	l, ls, one1 := rec.summary("layer"), rec.summary("layer.sync"), rec.summary("one")
	t = &Table{
		Title: "17. Fork of a workspace's history against `cp -a` of the workspace",
		About: fmt.Sprintf("Table 10's generated workspace (%s files, %s) with one checkpoint, on the harness's disk. The first row "+
			"is the fork of a sandbox with a disk image (see the first note). The per-file fork is "+
			"`history.Fork` from that checkpoint into a new store and an empty workspace, which `paddock sandbox fork` runs before "+
			"the new sandbox starts: the store's blobs are shared (FICLONE where the file system has reflinks, else hard links), "+
			"the index copied, and the checkpoint's files written into the new workspace as a restore writes them, made durable "+
			"with one syncfs. The baseline is `cp -a` of the workspace, not synced. Both after a sync, untimed; interleaved.",
			grouped(plan.files()), sizeText(plan)),
		Rows: []Row{
			{Name: "fork of the workspace's disk image, its source at the checkpoint (copy it frozen and sparse while proving the source is the checkpoint, share the history, record the restore)", Unit: "ms", Summary: d, Ratio: ratio(d.P50, c.P50), Target: "≤ 0.1× cp -a", Met: yesNo(d.P50 <= 0.1*c.P50)},
			{Name: "of which copying the image (`FIFREEZE`, `SEEK_DATA`/`SEEK_HOLE`, `copy_file_range`, fsync), the proof beside it", Unit: "ms", Summary: dc, Ratio: ratio(dc.P50, c.P50)},
			{Name: "the proof alone (a walk of the frozen source against its stat cache), within the copy's time", Unit: "ms", Summary: dp, Ratio: ratio(dp.P50, c.P50)},
			{Name: "of which sharing the history's blobs", Unit: "ms", Summary: ds, Ratio: ratio(ds.P50, c.P50)},
			{Name: "of which mounting the copy and recording the restore", Unit: "ms", Summary: dr, Ratio: ratio(dr.P50, c.P50)},
			{Name: "fork of the disk image without the proof (a source changed since its checkpoint: restore the checkpoint over the copy)", Unit: "ms", Summary: w, Ratio: ratio(w.P50, c.P50), Target: "≤ 0.1× cp -a", Met: yesNo(w.P50 <= 0.1*c.P50)},
			{Name: "of which copying the image", Unit: "ms", Summary: wc, Ratio: ratio(wc.P50, c.P50)},
			{Name: "of which sharing the history's blobs", Unit: "ms", Summary: ws2, Ratio: ratio(ws2.P50, c.P50)},
			{Name: "of which mounting the copy and restoring the checkpoint over it", Unit: "ms", Summary: wr, Ratio: ratio(wr.P50, c.P50)},
			{Name: "per-file fork (share the history, write the files), where there is no image", Unit: "ms", Summary: f, Ratio: ratio(f.P50, c.P50), Target: "≤ 0.1× cp -a", Met: yesNo(f.P50 <= 0.1*c.P50)},
			{Name: "of which sharing the history's blobs", Unit: "ms", Summary: s, Ratio: ratio(s.P50, c.P50)},
			{Name: "layered fork (share the blobs, write the checkpoint's tree as overlay metadata), not synced as `cp -a` is not", Unit: "ms", Summary: l, Ratio: ratio(l.P50, c.P50), Target: "≤ 0.1× cp -a", Met: yesNo(l.P50 <= 0.1*c.P50)},
			{Name: "then one syncfs of its file system (the harness's, shared)", Unit: "ms", Summary: ls, Ratio: ratio(ls.P50, c.P50)},
			{Name: "copy of one file of the workspace's size (`cp --sparse=always`)", Unit: "ms", Summary: one1, Ratio: ratio(one1.P50, c.P50)},
			{Name: "`cp -a` of the workspace", Unit: "ms", Summary: c, Ratio: "1.00× (baseline)"},
		},
		Notes: []string{
			fmt.Sprintf("The disk fork is what `paddock sandbox fork` does for a sandbox with a disk image (a disk limit, and root): the "+
				"workspace is in an ext4 image of %s made and loop-mounted as a sandbox's is, its history store beside it; each round "+
				"copies the image while its file system is frozen, syncs the copy, mounts it and forks the history over it. The "+
				"first row proves, beside the copy and while the source is frozen, that the source is exactly the checkpoint "+
				"(`history.ProveFrozen`: every name, mode and time, and every file's stat as its stat cache recorded it with the "+
				"checkpoint's hash), then runs `history.ForkOverProvenCopy`, which shares the blobs, carries the stat cache over and "+
				"records the restore without walking the copy: proven in %d of %d rounds. Without the proof, `history.ForkOverCopy` "+
				"restores the checkpoint over the copy, trusting the carried stat cache (%d entries), so no file is written again, "+
				"but every inode of the copy is read from its fresh mount. The first fork of each kind was compared with the "+
				"workspace (`diff -r`), untimed, and each proven fork's store was opened over its copy and found at the "+
				"checkpoint by a scan, untimed. Not timed here: the new sandbox's start, which gives the copy's files to its own "+
				"id range (one chown per file, as for the per-file fork).", img.size, proofs["disk"], len(rec.series["disk.proven"]), infos["disk"].Trusted),
			fmt.Sprintf("Blobs shared: %d by reflink, %d by hard link. The workspace's files must be the fork's own (never links to "+
				"files its source can still write), so where the file system has no reflinks (ext4, as here; and a sandbox's "+
				"workspace is on a disk image of its own) every byte of them is written again, as `cp -a` writes it: the "+
				"target is met only by sharing the history, which costs what a hard link costs per blob.", info.Cloned, info.Linked),
			fmt.Sprintf("The layered fork wrote %d files as metadata only (an empty file of the entry's size, mode, owner and mtime, "+
				"with overlayfs's metacopy and redirect xattrs naming its blob), then made durable with one syncfs, timed apart: it "+
				"flushes whatever else is dirty on the file system too, as the fork's own syncfs does; its first "+
				"tree was mounted as `overlay -o metacopy=on,lowerdir=META::OBJECTS` and read back against the workspace, untimed. "+
				"Copying the bytes at all, even as one file in the kernel (what a sparse copy of a disk image costs at least), "+
				"is the last row.", linfo.Files),
		},
	}
	t.Rows = append(t.Rows, xfsRows(rec, c, xfs.missing)...)
	t.Notes = append(t.Notes, xfsNote(rec, c, infos["xfs"], proofs["xfs"], xfs.missing))
	return t, nil
}

// xfsRows are table 17's rows of the disk fork on a file system with reflinks, against
// `cp -a` on the same one (c is `cp -a` on the harness's disk); none where there is none.
func xfsRows(rec *recorder, c Summary, missing string) []Row {
	if missing != "" {
		return nil
	}
	x, xc, xs, xr, xcp := rec.summary("xfs.proven"), rec.summary("xfs.proven.copy"), rec.summary("xfs.proven.share"), rec.summary("xfs.proven.restore"), rec.summary("xfs.cp")
	return []Row{
		{Name: "*on XFS with reflinks:* the same fork of the workspace's disk image, its source at the checkpoint, the image and the history on XFS", Unit: "ms", Summary: x, Ratio: ratio(x.P50, xcp.P50), Target: "≤ 0.1× cp -a on XFS", Met: yesNo(x.P50 <= 0.1*xcp.P50)},
		{Name: "of which copying the image (`copy_file_range` clones its extents), the proof beside it", Unit: "ms", Summary: xc, Ratio: ratio(xc.P50, xcp.P50)},
		{Name: "of which sharing the history's blobs (one reflink each)", Unit: "ms", Summary: xs, Ratio: ratio(xs.P50, xcp.P50)},
		{Name: "of which mounting the copy and recording the restore", Unit: "ms", Summary: xr, Ratio: ratio(xr.P50, xcp.P50)},
		{Name: "*on XFS with reflinks:* `cp -a` of the workspace (cp clones each file: `--reflink=auto`, coreutils' default)", Unit: "ms", Summary: xcp, Ratio: "1.00× (baseline on XFS); " + ratio(xcp.P50, c.P50) + " cp -a on the harness's disk"},
	}
}

// xfsNote says what the rows on XFS measured, or why there are none.
func xfsNote(rec *recorder, c Summary, info history.ForkInfo, proofs int, missing string) string {
	if missing != "" {
		return "Not measured: the disk fork on a file system with reflinks, since " + missing + "."
	}
	x, xcp := rec.summary("xfs.proven"), rec.summary("xfs.cp")
	return fmt.Sprintf("*On XFS with reflinks*: the harness made an XFS (`mkfs.xfs -m reflink=1`) in a sparse file of its disk, "+
		"loop-mounted, and put there a second source as the first row's (its image and history store) and a plain copy of "+
		"the workspace: what a host whose workspace root is on XFS (or another file system with reflinks, such as btrfs) "+
		"does. There the fork of the disk image copies no data: `copy_file_range` clones the image's extents and every blob "+
		"is a reflink (%d by reflink, %d by hard link), so the fork takes %.1f ms against %.1f ms for `cp -a`, which clones each file "+
		"there too (%s; against `cp -a` on the harness's disk, %s); proven in %d of %d rounds. The first fork was compared "+
		"with the workspace (`diff -r`), untimed. There the target cannot be met by sharing blobs one by one: a clone per "+
		"blob of the history is the work `cp -a` does per file of the workspace.",
		info.Cloned, info.Linked, x.P50, xcp.P50, ratio(x.P50, xcp.P50), ratio(x.P50, c.P50), proofs, len(rec.series["xfs.proven"]))
}

// makeReflinkFS makes an XFS with reflinks in a sparse file of size under dir and mounts it;
// where mkfs.xfs is missing it says so in missing and makes nothing.
func makeReflinkFS(ctx context.Context, dir string, size int64) (*reflinkFS, error) {
	x := &reflinkFS{root: filepath.Join(dir, "xfs")}
	err := xfs.Mount(ctx, filepath.Join(dir, "xfs.img"), x.root, size)
	if errors.Is(err, xfs.ErrMissing) {
		return &reflinkFS{missing: err.Error()}, nil
	}
	return x, err
}

// reflinkFS is the XFS makeReflinkFS made, mounted at root, or why there is none.
type reflinkFS struct{ root, missing string }

func (x *reflinkFS) close() {
	if x.missing == "" {
		_ = unmountAt(x.root)
	}
}

// syncDir makes what is under dir durable: one syncfs of its file system.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// checkLayer mounts a layered fork's tree over its objects and compares every file with
// the workspace it was made from.
func checkLayer(ctx context.Context, dir, meta, objects, ws string) error {
	base, err := os.MkdirTemp(dir, "layer-mount-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(base)
	upper, work, mnt := filepath.Join(base, "upper"), filepath.Join(base, "work"), filepath.Join(base, "mnt")
	for _, d := range []string{upper, work, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("overlay", mnt, "overlay", 0, "metacopy=on,redirect_dir=on,lowerdir="+meta+"::"+objects+",upperdir="+upper+",workdir="+work); err != nil {
		return fmt.Errorf("mount the layered fork: %w", err)
	}
	defer func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) }()
	if out, err := exec.CommandContext(ctx, "diff", "-r", "--no-dereference", ws, mnt).CombinedOutput(); err != nil {
		return fmt.Errorf("the layered fork differs from the workspace: %v: %.2000s", err, out)
	}
	return nil
}

// writeOneFile writes one file of p's size.
func writeOneFile(path string, p genPlan) error {
	var n int64
	for _, f := range p.Files {
		n += int64(f.Size)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*7 + i/251)
	}
	for n > 0 {
		k := min(n, int64(len(buf)))
		if _, err := f.Write(buf[:k]); err != nil {
			f.Close()
			return err
		}
		n -= k
	}
	return f.Close()
}

// sizeText is the generated workspace's size, in MB.
func sizeText(p genPlan) string {
	var n int64
	for _, f := range p.Files {
		n += int64(f.Size)
	}
	return fmt.Sprintf("%d MB", n/1_000_000)
}

// diskSource is the disk fork's source: a sandbox's kind of disk image holding the
// workspace, mounted, and its history store beside it with one checkpoint.
type diskSource struct {
	image, mount, store string
	size                wire.Size
	h                   *history.History
}

func (d *diskSource) workspace() string { return filepath.Join(d.mount, "workspace") }

func (d *diskSource) close() {
	d.h.Close()
	_ = unmountAt(d.mount)
}

// diskForkSource makes the disk fork's source under dir. The workspace's files are left to
// age past the history's racy window and scanned again, as a sandbox's workspace would have
// been, so that its stat cache holds them all.
func (e *Env) diskForkSource(dir string, plan genPlan, quick bool) (*diskSource, error) {
	d := &diskSource{image: filepath.Join(dir, "src.img"), mount: filepath.Join(dir, "src-disk"), store: filepath.Join(dir, "src-store"), size: 2 << 30}
	if quick {
		d.size = 256 << 20
	}
	if err := runner.FormatImage(d.image, d.size); err != nil {
		return nil, err
	}
	if err := os.Mkdir(d.mount, 0o700); err != nil {
		return nil, err
	}
	if err := runner.MountImage(d.image, d.mount); err != nil {
		return nil, err
	}
	if err := plan.write(d.workspace()); err != nil {
		_ = unmountAt(d.mount)
		return nil, fmt.Errorf("generate the disk's workspace: %w", err)
	}
	h, err := history.Open(d.workspace(), d.store)
	if err == nil {
		_, _, err = h.Checkpoint(history.CauseManual, "initial")
	}
	if err == nil {
		time.Sleep(200 * time.Millisecond)
		_, _, err = h.Checkpoint(history.CauseManual, "again")
	}
	if err != nil {
		if h != nil {
			h.Close()
		}
		_ = unmountAt(d.mount)
		return nil, err
	}
	d.h = h
	return d, nil
}

// checkProvenFork opens a proven fork's store over its copy and checks that a scan finds
// the copy at the fork's checkpoint: the restore it recorded without a walk holds.
func checkProvenFork(store, ws string) error {
	h, err := history.Open(ws, store)
	if err != nil {
		return err
	}
	defer h.Close()
	cur, _ := h.Current()
	c, changed, err := h.Checkpoint(history.CauseManual, "check")
	if err != nil {
		return err
	}
	if changed || c.Tree != cur.Tree {
		return fmt.Errorf("the proven fork's copy is not its checkpoint %s: a scan made %s", cur.ID, c.ID)
	}
	return nil
}

// checkDiskFork compares a disk fork's workspace with its source's.
func checkDiskFork(ctx context.Context, fork, ws string) error {
	if out, err := exec.CommandContext(ctx, "diff", "-r", "--no-dereference", ws, fork).CombinedOutput(); err != nil {
		return fmt.Errorf("the disk fork differs from the workspace: %v: %.2000s", err, out)
	}
	return nil
}

// unmountAt detaches what is mounted at dir, if anything.
func unmountAt(dir string) error {
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}
