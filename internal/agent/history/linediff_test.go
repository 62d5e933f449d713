package history

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnifiedAppliesWithPatch makes random edits of random texts and checks that GNU patch,
// given the unified diff, turns the old text into the new one.
func TestUnifiedAppliesWithPatch(t *testing.T) {
	if _, err := exec.LookPath("patch"); err != nil {
		t.Fatal("patch is not installed (Debian's patch package)")
	}
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(1, 2))
	words := []string{"alpha\n", "beta\n", "gamma\n", "delta\n", "}\n", "\n", "return x\n"}
	for n := range 200 {
		var a []string
		for range r.IntN(40) {
			a = append(a, words[r.IntN(len(words))])
		}
		b := append([]string(nil), a...)
		for range 1 + r.IntN(5) {
			switch i := r.IntN(len(b) + 1); r.IntN(3) {
			case 0:
				b = append(b[:i], append([]string{words[r.IntN(len(words))]}, b[i:]...)...)
			case 1:
				if i < len(b) {
					b = append(b[:i], b[i+1:]...)
				}
			default:
				if i < len(b) {
					b[i] = fmt.Sprintf("line %d\n", r.IntN(9))
				}
			}
		}
		if n%7 == 0 && len(b) > 0 {
			b[len(b)-1] = strings.TrimSuffix(b[len(b)-1], "\n") + "no newline"
		}
		if strings.Join(a, "") == strings.Join(b, "") {
			continue
		}
		u, ok := unified("a/f", "b/f", a, b)
		if !ok {
			t.Fatal("no diff")
		}
		f := filepath.Join(dir, "f")
		if err := os.WriteFile(f, []byte(strings.Join(a, "")), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("patch", "--quiet", "--force", f)
		cmd.Stdin = strings.NewReader(u)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("case %d: patch: %v: %s\ndiff:\n%s", n, err, out, u)
		}
		got, _ := os.ReadFile(f)
		if string(got) != strings.Join(b, "") {
			t.Fatalf("case %d: patched %q, want %q\ndiff:\n%s", n, got, strings.Join(b, ""), u)
		}
	}
}

// TestFileDiffs diffs two checkpoints: a changed text file, an added and a removed one, a
// binary one, one too large to read and a diff cut at the limit.
func TestFileDiffs(t *testing.T) {
	ws, store := t.TempDir(), t.TempDir()
	write(t, ws, "app.js", "one\ntwo\nthree\n", 0o644)
	write(t, ws, "gone.txt", "bye\n", 0o644)
	write(t, ws, "img.png", "\x89PNG\x00\x01", 0o644)
	write(t, ws, "big.txt", strings.Repeat("x\n", maxDiffInput), 0o644)
	write(t, ws, "long.txt", "a\n", 0o644)
	h := open(t, ws, store)
	c1 := mustCheckpoint(t, h, "one")
	write(t, ws, "app.js", "one\n2\nthree\n", 0o644)
	os.Remove(filepath.Join(ws, "gone.txt"))
	write(t, ws, "src/new.go", "package x\n", 0o644)
	write(t, ws, "img.png", "\x89PNG\x00\x02", 0o644)
	write(t, ws, "big.txt", strings.Repeat("y\n", maxDiffInput), 0o644)
	write(t, ws, "long.txt", strings.Repeat("a long line of text\n", 500), 0o644)
	c2 := mustCheckpoint(t, h, "two")
	fds, err := h.FileDiffs(c1.ID, c2.ID, 2000)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]FileDiff{}
	for _, fd := range fds {
		got[fd.Path] = fd
	}
	if fd := got["app.js"]; fd.Status != "changed" || fd.Unified != "--- a/app.js\n+++ b/app.js\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n" {
		t.Errorf("app.js: %+v", fd)
	}
	if fd := got["src/new.go"]; fd.Status != "added" || fd.Unified != "--- /dev/null\n+++ b/src/new.go\n@@ -0,0 +1 @@\n+package x\n" {
		t.Errorf("src/new.go: %+v", fd)
	}
	if fd := got["gone.txt"]; fd.Status != "removed" || fd.Unified != "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n" {
		t.Errorf("gone.txt: %+v", fd)
	}
	if fd := got["img.png"]; !fd.Binary || fd.Unified != "" {
		t.Errorf("img.png: %+v, want binary", fd)
	}
	if fd := got["big.txt"]; !strings.Contains(fd.Note, "too large to diff") || fd.Unified != "" {
		t.Errorf("big.txt: %+v, want too large", fd)
	}
	if fd := got["long.txt"]; !fd.Truncated || len(fd.Unified) > 2000 || !strings.HasSuffix(fd.Unified, "\n") || !strings.HasPrefix(fd.Unified, "--- a/long.txt") {
		t.Errorf("long.txt: truncated %v, %d bytes", fd.Truncated, len(fd.Unified))
	}
	if _, ok := got["src"]; ok {
		t.Error("the directory src has a diff of its own")
	}
}

// FuzzUnified diffs two texts of any bytes: the edit script keeps a's lines in order
// (kept and removed) and b's (kept and added), and the unified diff never panics.
func FuzzUnified(f *testing.F) {
	f.Add([]byte("a\nb\nc\n"), []byte("a\nx\nc"))
	f.Add([]byte(""), []byte("\n\n"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		la, lb := splitLines(a), splitLines(b)
		ops, ok := edits(la, lb)
		if !ok {
			return
		}
		var gotA, gotB strings.Builder
		for _, o := range ops {
			if o.kind != '+' {
				gotA.WriteString(o.line)
			}
			if o.kind != '-' {
				gotB.WriteString(o.line)
			}
		}
		if gotA.String() != string(a) || gotB.String() != string(b) {
			t.Fatalf("the edit script does not rebuild the texts: %q %q", gotA.String(), gotB.String())
		}
		unified("a/f", "b/f", la, lb)
		isBinary(a)
	})
}
