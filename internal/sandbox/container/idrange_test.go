package container

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

// withClaims points the claims at a directory of the test's own.
func withClaims(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "claims")
	old := idRangeClaims
	idRangeClaims = dir
	t.Cleanup(func() { idRangeClaims = old })
	return dir
}

// Concurrent claims get distinct ranges, never range 0, each recorded in its sandbox's
// directory; a release frees the range for the next claim, and only the holder's release
// counts.
func TestClaimIDRange(t *testing.T) {
	claims := withClaims(t)
	const n = 64
	dirs := make([]string, n)
	bases := make([]uint32, n)
	var wg sync.WaitGroup
	for i := range n {
		dirs[i] = t.TempDir()
		wg.Go(func() {
			b, err := claimIDRange(dirs[i], 0)
			if err != nil {
				t.Error(err)
			}
			bases[i] = b
		})
	}
	wg.Wait()
	seen := map[uint32]bool{}
	for i, b := range bases {
		if b == AgentHostID || b < AgentHostID || (b-AgentHostID)%idRangeSize != 0 {
			t.Errorf("claim %d: base %d is not a range's start past range 0", i, b)
		}
		if seen[b] {
			t.Errorf("range %d handed out twice", b)
		}
		seen[b] = true
		if held := heldIDRange(dirs[i]); held != b {
			t.Errorf("claim %d: the sandbox directory records %d, want %d", i, held, b)
		}
	}
	if entries, _ := os.ReadDir(claims); len(entries) != n {
		t.Fatalf("%d claims on disk, want %d", len(entries), n)
	}
	// Only the holder's release counts.
	releaseIDRange(t.TempDir())
	for _, d := range dirs {
		releaseIDRange(d)
	}
	if entries, _ := os.ReadDir(claims); len(entries) != 0 {
		t.Errorf("%d claims left after every release", len(entries))
	}
}

// A claim whose sandbox directory is gone (a crash before the release) is taken over; a
// live one is not, and neither is one still being written.
func TestStaleIDRangeTakenOver(t *testing.T) {
	claims := withClaims(t)
	if err := os.MkdirAll(claims, 0o700); err != nil {
		t.Fatal(err)
	}
	live, gone := t.TempDir(), filepath.Join(t.TempDir(), "gone")
	for n := 1; n < idRanges; n++ {
		holder := live
		switch n {
		case 4242:
			holder = gone
		case 4243:
			holder = ""
		}
		if err := os.WriteFile(filepath.Join(claims, strconv.Itoa(n)), []byte(holder), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	b, err := claimIDRange(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if b != rangeBase(4242) {
		t.Fatalf("claimed %d, want the stale range 4242 (%d)", b, rangeBase(4242))
	}
	if _, err := claimIDRange(t.TempDir(), 0); err == nil {
		t.Fatal("a claim with every range held succeeded")
	}
}

// A claim gets the range it prefers when that one is free (a restarted sandbox keeps the
// range its history store belongs to), and another when it is held; a preference that is
// not a range's first id past range 0 is no preference.
func TestClaimIDRangePrefers(t *testing.T) {
	withClaims(t)
	want := rangeBase(77)
	if b, err := claimIDRange(t.TempDir(), want); err != nil || b != want {
		t.Fatalf("claim preferring %d: %d, %v", want, b, err)
	}
	if b, err := claimIDRange(t.TempDir(), want); err != nil || b == want {
		t.Fatalf("claim preferring the held %d: %d, %v", want, b, err)
	}
	for _, prefer := range []uint32{1000, AgentHostID, want + 1, rangeBase(idRanges-1) + idRangeSize} {
		if b, err := claimIDRange(t.TempDir(), prefer); err != nil || b == AgentHostID || (b-AgentHostID)%idRangeSize != 0 {
			t.Errorf("claim preferring %d: %d, %v", prefer, b, err)
		}
	}
}

// Claims that race to take over stale claims never end up holding one range twice.
func TestConcurrentTakeOvers(t *testing.T) {
	claims := withClaims(t)
	if err := os.MkdirAll(claims, 0o700); err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(t.TempDir(), "gone")
	for n := 1; n < idRanges; n++ {
		if err := os.WriteFile(filepath.Join(claims, strconv.Itoa(n)), []byte(gone), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const n = 32
	bases := make([]uint32, n)
	var wg sync.WaitGroup
	for i := range n {
		dir := t.TempDir()
		wg.Go(func() {
			b, err := claimIDRange(dir, rangeBase(5)) // all prefer one range: the worst case
			if err != nil {
				t.Error(err)
			}
			bases[i] = b
		})
	}
	wg.Wait()
	seen := map[uint32]bool{}
	for _, b := range bases {
		if seen[b] {
			t.Fatalf("range %d taken over twice: %v", b, bases)
		}
		seen[b] = true
	}
}
