package identity

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

func requireRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("switching filesystem identity needs root (CI runs as root)")
	}
}

// openDir is a world-writable temporary directory that any uid can reach.
func openDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "identity")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

func owner(t *testing.T, p string) (uint32, uint32) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}

func TestDoActsAsTheUser(t *testing.T) {
	requireRoot(t)
	dir := openDir(t)
	secret := filepath.Join(dir, "root-only")
	if err := os.WriteFile(secret, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	u := User{UID: 4242, GID: 4343}
	err := Do(u, func() error {
		if err := os.WriteFile(filepath.Join(dir, "made"), []byte("y"), 0o644); err != nil {
			return err
		}
		_, err := os.ReadFile(secret)
		if !errors.Is(err, os.ErrPermission) {
			t.Errorf("reading a root-only file as uid %d: %v, want permission denied (CAP_DAC_OVERRIDE must be gone)", u.UID, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if uid, gid := owner(t, filepath.Join(dir, "made")); uid != u.UID || gid != u.GID {
		t.Fatalf("file made as %+v is owned by %d:%d", u, uid, gid)
	}
	// Afterwards, and on every other thread, the agent is itself again.
	if _, err := os.ReadFile(secret); err != nil {
		t.Fatalf("identity leaked out of Do: %v", err)
	}
}

func TestDoDoesNotLeakToOtherGoroutines(t *testing.T) {
	requireRoot(t)
	dir := openDir(t)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			_ = Do(User{UID: 4242, GID: 4242}, func() error {
				return os.WriteFile(filepath.Join(dir, "u"+string(rune('a'+i%26))), nil, 0o644)
			})
		}()
		go func() {
			defer wg.Done()
			p := filepath.Join(dir, "r"+string(rune('a'+i%26)))
			_ = os.WriteFile(p, nil, 0o644)
		}()
	}
	wg.Wait()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		uid, _ := owner(t, filepath.Join(dir, e.Name()))
		if want := map[byte]uint32{'u': 4242, 'r': 0}[e.Name()[0]]; uid != want {
			t.Errorf("%s owned by %d, want %d", e.Name(), uid, want)
		}
	}
}

func TestZeroUserRunsAsItself(t *testing.T) {
	ran := false
	if err := Do(User{}, func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("Do with the zero user: ran %v, %v", ran, err)
	}
}
