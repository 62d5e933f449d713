package history

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BenchmarkCheckpointOneEdit: a checkpoint after editing one file of a 2,000-file workspace
// (the target, at 10,000 files: ≤ 20 ms and ≤ 1 MB of new storage). The 2,000 files
// sit in 40 directories of 50, so the edit makes one content blob and two trees.
func BenchmarkCheckpointOneEdit(b *testing.B) {
	b.Run("edit=one", func(b *testing.B) { benchCheckpoint(b, true) })
	// unchanged: the walk and stat-cache check alone, which is what grows with the workspace.
	b.Run("edit=none", func(b *testing.B) { benchCheckpoint(b, false) })
}

func benchCheckpoint(b *testing.B, edit bool) {
	const files, perDir = 2000, 50
	ws, store := b.TempDir(), b.TempDir()
	body := strings.Repeat("x", 4096)
	for i := range files {
		p := filepath.Join(ws, fmt.Sprintf("d%02d", i/perDir), fmt.Sprintf("f%04d.txt", i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(fmt.Sprintf("%d %s", i, body)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	h, err := Open(ws, store)
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	if _, _, err := h.Checkpoint(CauseManual, "base"); err != nil {
		b.Fatal(err)
	}
	time.Sleep(2 * racyWindow) // let the base files age out of the racy window
	if _, _, err := h.Checkpoint(CauseManual, "cache"); err != nil {
		b.Fatal(err)
	}
	before := storeBytes(b, store)
	target := filepath.Join(ws, "d07", "f0350.txt")
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if edit {
			b.StopTimer()
			os.WriteFile(target, []byte(fmt.Sprintf("edit %d %s", i, body)), 0o644)
			b.StartTimer()
		}
		if _, created, err := h.Checkpoint(CauseAgentWrite, ""); err != nil || created != edit {
			b.Fatalf("checkpoint: %v created %v", err, created)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(storeBytes(b, store)-before)/float64(b.N), "store-B/op")
}

// storeBytes is the history store's size, blobs and index.
func storeBytes(b *testing.B, dir string) int64 {
	var n int64
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// BenchmarkUndoOneFile: undo, then redo, of a one-file edit in a 2,000-file workspace
// (the target: undo of 1,000 files ≤ 1 s; this is the small-edit case). Each
// iteration is one undo and one redo, each with its pre-scan, restore and restore checkpoint.
func BenchmarkUndoOneFile(b *testing.B) {
	ws, store := b.TempDir(), b.TempDir()
	body := strings.Repeat("x", 4096)
	for i := range 2000 {
		p := filepath.Join(ws, fmt.Sprintf("d%02d", i/50), fmt.Sprintf("f%04d.txt", i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(fmt.Sprintf("%d %s", i, body)), 0o644)
	}
	h, err := Open(ws, store)
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	h.Checkpoint(CauseManual, "base")
	os.WriteFile(filepath.Join(ws, "d07", "f0350.txt"), []byte("edited"), 0o644)
	h.Checkpoint(CauseManual, "edit")
	time.Sleep(2 * racyWindow)
	b.ResetTimer()
	for b.Loop() {
		if _, err := h.Undo(); err != nil {
			b.Fatal(err)
		}
		if _, err := h.Redo(); err != nil {
			b.Fatal(err)
		}
	}
}
