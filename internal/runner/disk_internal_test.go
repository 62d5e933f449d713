package runner

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/paddockhq/paddock/internal/wire"
)

// promisedBytes counts what every image may still grow by, and the whole history budget
// of a persistent sandbox (one with a history store beside its image).
func TestPromisedBytes(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"u/disks", "u/history/sb-persistent", "v/disks"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, img := range []string{"u/disks/sb-persistent.img", "v/disks/sb-oneshotxx.img"} {
		f, err := os.Create(filepath.Join(root, img))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(100 << 20); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(make([]byte, 1<<20)); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	got := promisedBytes(root)
	if want := int64(2*99<<20) + wire.HistoryBudget; got < want-(1<<20) || got > want+(1<<20) {
		t.Errorf("promised %d bytes, want about %d (two images' room and one history budget)", got, want)
	}
}
