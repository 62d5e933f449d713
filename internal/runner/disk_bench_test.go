package runner

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/paddockhq/paddock/internal/wire"
)

// The cost of disk quotas, measured as the runner pays it (docs/security.md, "Disk
// quotas"): `go test -run XXX -bench Disk -benchtime 20x ./internal/runner` as root.

func benchRunner(b *testing.B) *Runner {
	if os.Geteuid() != 0 {
		b.Skip("mounting a disk image needs root")
	}
	dir := b.TempDir()
	cfg := DefaultConfig()
	cfg.DataDir = dir
	cfg.fill()
	if err := os.MkdirAll(filepath.Join(cfg.WorkspaceRoot, "bench", "tmp"), 0o711); err != nil {
		b.Fatal(err)
	}
	return New(cfg, slog.New(slog.DiscardHandler))
}

// BenchmarkDiskLifecycle: what a one-shot sandbox's disk adds to its start and end: make a
// 4GiB sparse image, mount it, prepare its directories; unmount it and remove it.
func BenchmarkDiskLifecycle(b *testing.B) {
	r := benchRunner(b)
	for b.Loop() {
		id := NewID()
		d, err := r.openDisk("bench", id, filepath.Join(r.cfg.WorkspaceRoot, "bench", "tmp", id), 4<<30, true, wire.TierContainer, 1000, 1000)
		if err != nil {
			b.Fatal(err)
		}
		if err := d.close(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDiskWrite: 64MiB written and fsync'd, into a directory of the host's file
// system and into a mounted disk image on it.
func BenchmarkDiskWrite(b *testing.B) {
	r := benchRunner(b)
	id := NewID()
	d, err := r.openDisk("bench", id, filepath.Join(r.cfg.WorkspaceRoot, "bench", "tmp", id), 4<<30, true, wire.TierContainer, 1000, 1000)
	if err != nil {
		b.Fatal(err)
	}
	defer d.close()
	buf := make([]byte, 1<<20)
	for _, where := range []struct{ name, dir string }{{"host", b.TempDir()}, {"image", d.workspace()}} {
		b.Run(where.name, func(b *testing.B) {
			b.SetBytes(64 << 20)
			for b.Loop() {
				f, err := os.Create(filepath.Join(where.dir, "f"))
				if err != nil {
					b.Fatal(err)
				}
				for range 64 {
					if _, err := f.Write(buf); err != nil {
						b.Fatal(err)
					}
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
				f.Close()
				os.Remove(f.Name())
			}
		})
	}
}
