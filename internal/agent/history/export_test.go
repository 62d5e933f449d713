package history

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// exportSource makes a history with every kind of entry, several checkpoints and a redo
// stack, and returns it with each checkpoint's workspace and the export.
func exportSource(t *testing.T) (*History, map[string]map[string]node, []byte) {
	t.Helper()
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	states := map[string]map[string]node{}
	steps := []func(){
		func() {
			write(t, ws, "a.txt", "hello", 0o644)
			write(t, ws, "bin", string([]byte{0, 1, 2, 0xff}), 0o755)
			os.Symlink("a.txt", filepath.Join(ws, "link"))
			os.MkdirAll(filepath.Join(ws, "empty"), 0o700)
		},
		func() { write(t, ws, "src/main.go", strings.Repeat("package main\n", 1000), 0o644) },
		func() { os.Remove(filepath.Join(ws, "a.txt")); write(t, ws, "src/b.go", "package b", 0o600) },
	}
	for i, step := range steps {
		step()
		c := mustCheckpoint(t, h, string(rune('a'+i)))
		states[c.ID] = snapshot(t, ws)
	}
	if _, err := h.Undo(); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := h.Export(&buf); err != nil {
		t.Fatal(err)
	}
	return h, states, buf.Bytes()
}

// TestExportImport: an export imported into a new, empty workspace and store gives the same
// timeline, the workspace at the same checkpoint, and every checkpoint restores exactly;
// redo still works.
func TestExportImport(t *testing.T) {
	src, states, data := exportSource(t)
	cur, _ := src.Current()

	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	c, err := h.Import(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != cur.ID {
		t.Errorf("Import = %+v, want at %s", c, cur.ID)
	}
	if got := snapshot(t, ws); !mapsEqual(got, states[cur.ID]) {
		t.Errorf("imported workspace:\n got %v\nwant %v", got, states[cur.ID])
	}
	want, got := src.List(), h.List()
	if len(got) != len(want) {
		t.Fatalf("imported %d checkpoints, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].ID != want[i].ID || got[i].Tree != want[i].Tree || got[i].Cause != want[i].Cause {
			t.Errorf("checkpoint %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if _, err := h.Redo(); err != nil {
		t.Fatalf("redo after import: %v", err)
	}
	for id, state := range states {
		if _, err := h.Restore(id); err != nil {
			t.Fatal(err)
		}
		if got := snapshot(t, ws); !mapsEqual(got, state) {
			t.Errorf("restore %s after import:\n got %v\nwant %v", id, got, state)
		}
	}
	// New checkpoints are numbered past the imported ones.
	write(t, ws, "new", "n", 0o644)
	if n := mustCheckpoint(t, h, "n"); n.ID == "" || slicesContainsID(want, n.ID) {
		t.Errorf("new checkpoint %s reuses an imported ID", n.ID)
	}
}

func slicesContainsID(cs []Checkpoint, id string) bool {
	for _, c := range cs {
		if c.ID == id {
			return true
		}
	}
	return false
}

// TestImportRefusesBadExports: corrupt, truncated or inconsistent exports are refused with
// an error naming what is wrong, and the history and workspace are left as they were.
func TestImportRefusesBadExports(t *testing.T) {
	_, _, data := exportSource(t)
	idxLen := int(binary.BigEndian.Uint64(data[len(exportMagic)+1:]))
	firstBlob := len(exportMagic) + 9 + idxLen
	flip := func(i int) []byte {
		b := bytes.Clone(data)
		b[i] ^= 0x20
		return b
	}
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "does not start as a paddock history export"},
		{"not an export", []byte("PK\x03\x04 a zip file"), "does not start as a paddock history export"},
		{"truncated in the magic", data[:10], "does not start as"},
		{"truncated in the index", data[:len(exportMagic)+20], "truncated in record 1 (the index)"},
		{"truncated in a blob", data[:firstBlob+9+40], "truncated in record 2 (blob"},
		{"truncated before the end record", data[:len(data)-41], "truncated: it ends at record"},
		{"truncated in the end record", data[:len(data)-5], "truncated in its end record"},
		{"blob content flipped", flip(firstBlob + 9 + 32 + 3), "does not match its hash"},
		{"index flipped", flip(len(exportMagic) + 9), "index is not valid"}, // '{' becomes '['
		{"index flipped, still JSON", flip(len(exportMagic) + 9 + 5), "checksum does not match"},
		{"checksum flipped", flip(len(data) - 3), "checksum does not match"},
		{"unknown record", append(bytes.Clone(data[:firstBlob]), 'X', 0, 0, 0, 0, 0, 0, 0, 0), "unknown kind 0x58"},
		{"trailing data", append(bytes.Clone(data), 'x'), "data follows its end record"},
		{"huge length", append([]byte(exportMagic), 'I', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), "out of bounds"},
		{"no blobs", endless(t, data[:firstBlob]), "missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws, store := t.TempDir(), t.TempDir()
			write(t, ws, "mine", "untouched", 0o644)
			h := open(t, ws, store)
			before := snapshot(t, ws)
			_, err := h.Import(bytes.NewReader(tt.data))
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "nothing was changed") {
				t.Fatalf("Import: %v, want InvalidArgument saying %q", err, tt.want)
			}
			if got := snapshot(t, ws); !mapsEqual(got, before) {
				t.Errorf("a refused import changed the workspace: %v", got)
			}
			if l := h.List(); len(l) != 1 || l[0].Message != "changes found before import" {
				t.Errorf("a refused import changed the history: %+v", l)
			}
		})
	}
}

// endless gives an export prefix a valid end record: whole, checksummed, but missing blobs.
func endless(t *testing.T, prefix []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	buf.Write(prefix)
	sum := sha256Sum(prefix)
	if err := writeRecord(&buf, recEnd, int64(len(sum)), bytes.NewReader(sum)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestImportEveryTruncation: no prefix of an export parses (every prefix of its first 2 KiB
// and its last 64 bytes, every 61st in between).
func TestImportEveryTruncation(t *testing.T) {
	_, _, data := exportSource(t)
	if _, err := readExport(bytes.NewReader(data), hashCheck); err != nil {
		t.Fatalf("the whole export: %v", err)
	}
	for n := 0; n < len(data); n++ {
		if n > 2048 && n < len(data)-64 && n%61 != 0 {
			continue
		}
		if _, err := readExport(bytes.NewReader(data[:n]), hashCheck); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("the first %d of %d bytes: %v, want refused", n, len(data), err)
		}
	}
}

func TestImportRefusesNonEmptyHistory(t *testing.T) {
	_, _, data := exportSource(t)
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	write(t, ws, "a", "1", 0o644)
	mustCheckpoint(t, h, "1")
	write(t, ws, "a", "2", 0o644) // not checkpointed: checkpointed by Import, then refused
	_, err := h.Import(bytes.NewReader(data))
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "not empty (2 checkpoints)") {
		t.Fatalf("import into a used history: %v", err)
	}
}

// TestCrashDuringImportAtEveryStep: once the import's journal is written, a crash at any
// point is finished by Open: the history is the imported one and the workspace wholly its
// current checkpoint.
func TestCrashDuringImportAtEveryStep(t *testing.T) {
	src, states, data := exportSource(t)
	cur, _ := src.Current()
	for n := 1; ; n++ {
		ws, store := t.TempDir(), t.TempDir()
		write(t, ws, "old", "the new sandbox's own file", 0o644)
		h, err := Open(ws, store)
		if err != nil {
			t.Fatal(err)
		}
		h.crashAfter = n
		_, err = h.Import(bytes.NewReader(data))
		h.Close()
		if err == nil {
			if n < 4 {
				t.Fatalf("the import took only %d steps", n)
			}
			t.Logf("crashed at each of the import's %d steps and recovered", n-1)
			return
		}
		if !errors.Is(err, errCrash) {
			t.Fatalf("crash after %d steps: %v", n, err)
		}
		h2, err := Open(ws, store)
		if err != nil {
			t.Fatalf("reopen after a crash at step %d: %v", n, err)
		}
		if r := h2.Recovered(); !strings.Contains(r, "interrupted import") {
			t.Errorf("crash at step %d: Recovered() = %q", n, r)
		}
		if got := snapshot(t, ws); !mapsEqual(got, states[cur.ID]) {
			t.Errorf("crash at step %d:\n got %v\nwant %v", n, got, states[cur.ID])
		}
		if c, _ := h2.Current(); c.ID != cur.ID || len(h2.List()) != len(src.List()) {
			t.Errorf("crash at step %d: at %s with %d checkpoints", n, c.ID, len(h2.List()))
		}
		h2.Close()
	}
}

// FuzzReadExport: the import parser, given any bytes, fails with ErrInvalidArgument or
// returns an index that holds together; it never panics.
func FuzzReadExport(f *testing.F) {
	ws, store := f.TempDir(), f.TempDir()
	h, err := Open(ws, store)
	if err != nil {
		f.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws, "a"), []byte("a"), 0o644)
	h.Checkpoint(CauseManual, "a")
	os.MkdirAll(filepath.Join(ws, "d"), 0o755)
	os.Symlink("a", filepath.Join(ws, "d", "l"))
	h.Checkpoint(CauseManual, "b")
	var buf bytes.Buffer
	if err := h.Export(&buf); err != nil {
		f.Fatal(err)
	}
	h.Close()
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:len(buf.Bytes())/2])
	f.Add([]byte(exportMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		idx, err := readExport(bytes.NewReader(data), hashCheck)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error outside the taxonomy: %v", err)
			}
			return
		}
		if err := idx.check(); err != nil {
			t.Fatalf("accepted an index that does not hold together: %v", err)
		}
	})
}

func sha256Sum(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}
