package cgroups

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestFreezeKeepsProcessesUntilThaw, on each cgroup version this host mounts (v1's
// freezer; v2's cgroup.freeze, on the unified mount of a hybrid host too): Freeze returns
// once the kernel reports the group frozen, its process answers nothing meanwhile, and
// after Thaw the same process answers again.
func TestFreezeKeepsProcessesUntilThaw(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("cgroup tests must run as root: only root may create cgroups")
	}
	roots := map[Mode]string{}
	switch DetectMode() {
	case V1:
		requireControllers(t, "freezer")
		roots[V1] = mountpoint
		var st unix.Statfs_t
		if unix.Statfs(filepath.Join(mountpoint, "unified"), &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			roots[V2] = filepath.Join(mountpoint, "unified")
		}
	case V2:
		roots[V2] = mountpoint
	}
	for mode, root := range roots {
		t.Run(mode.String(), func(t *testing.T) {
			g, err := create(mode, root, testPath(t), Limits{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				g.Thaw()
				cleanup(t, g)
				os.Remove(filepath.Join(root, "paddock-test"))
			})
			cmd := exec.Command("sh", "-c", `while read line; do echo "got $line"; done`)
			in, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			outR, outW := io.Pipe()
			cmd.Stdout = outW
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			if err := g.Add(cmd.Process.Pid); err != nil {
				t.Fatal(err)
			}
			lines := make(chan string, 4)
			go func() {
				s := bufio.NewScanner(outR)
				for s.Scan() {
					lines <- s.Text()
				}
			}()
			ask := func(n int, within time.Duration) bool {
				fmt.Fprintf(in, "%d\n", n)
				select {
				case l := <-lines:
					if l != fmt.Sprintf("got %d", n) {
						t.Fatalf("answer %q to %d", l, n)
					}
					return true
				case <-time.After(within):
					return false
				}
			}
			if !ask(1, time.Minute) {
				t.Fatal("the process never answered")
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := g.Freeze(ctx); err != nil {
				t.Fatal(err)
			}
			if frozen, err := g.Frozen(); !frozen || err != nil {
				t.Fatalf("Frozen() after Freeze = %v, %v", frozen, err)
			}
			if ask(2, 200*time.Millisecond) {
				t.Fatal("a frozen process answered")
			}
			if err := g.Thaw(); err != nil {
				t.Fatal(err)
			}
			if frozen, err := g.Frozen(); frozen || err != nil {
				t.Errorf("Frozen() after Thaw = %v, %v", frozen, err)
			}
			select {
			case l := <-lines:
				if !strings.HasSuffix(l, "2") {
					t.Fatalf("answer %q after thaw, want the one to 2", l)
				}
			case <-time.After(time.Minute):
				t.Fatal("the thawed process never answered the line sent while it was frozen")
			}
			if !ask(3, time.Minute) {
				t.Fatal("the thawed process does not answer")
			}
		})
	}
}
