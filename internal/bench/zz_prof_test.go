package bench

import (
	"os"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/agent/history"
)

func TestZZProfRestore(t *testing.T) {
	dir := os.Getenv("ZZPROF")
	if dir == "" {
		t.Skip()
	}
	ws, store := filepath.Join(dir, "ws"), filepath.Join(dir, "store")
	p := benchWorkspace.plan()
	if _, err := os.Stat(ws); err != nil {
		if err := p.write(ws); err != nil {
			t.Fatal(err)
		}
	}
	h, err := history.Open(ws, store, history.WithWatcher())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	start := time.Now()
	if _, _, err := h.Checkpoint(history.CauseManual, "initial"); err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoint %v", time.Since(start))
	time.Sleep(200 * time.Millisecond)
	h.Checkpoint(history.CauseWatcher, "")
	var pf *os.File
	if pp := os.Getenv("ZZCPU"); pp != "" {
		pf, _ = os.Create(pp)
	}
	if s := os.Getenv("ZZSIG"); s != "" {
		os.WriteFile(s, []byte("ready"), 0o644)
	}
	for i := 1; i <= 2; i++ {
		for j := range wideEdit {
			appendEdit(ws, p.editable(i*1013+j*9), -i)
		}
		syscall.Sync()
		h.Checkpoint(history.CauseExec, "")
		syscall.Sync()
		start = time.Now()
		if _, err := h.Undo(); err != nil {
			t.Fatal(err)
		}
		t.Logf("undo %v", time.Since(start))
	}
	for i := 0; i < 4; i++ {
		cur, _ := h.Current()
		emptyDir(ws, "")
		syscall.Sync()
		if pf != nil && i == 1 {
			pprof.StartCPUProfile(pf)
		}
		start = time.Now()
		if _, err := h.Restore(cur.ID); err != nil {
			t.Fatal(err)
		}
		t.Logf("restore %v", time.Since(start))
		if pf != nil && i == 1 {
			pprof.StopCPUProfile()
		}
	}
}
