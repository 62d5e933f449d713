package files

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire/agentv1"
)

// TestKernelRefusesNoFollowDir: this kernel gives os.Root the refusal its walk relies on.
func TestKernelRefusesNoFollowDir(t *testing.T) {
	if answered, err := checkNoFollow(openNoFollowDir); !answered || err != nil {
		t.Fatalf("on this kernel: answered %v, %v", answered, err)
	}
}

// Where the check cannot be made (the temporary directory cannot take it), the operation
// is refused, as unavailable, and the check is made again next time: never an unchecked
// file API, never one off for good because /tmp was full once.
func TestNoFollowCheckThatCannotBeMade(t *testing.T) {
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "missing"))
	if answered, err := checkNoFollow(openNoFollowDir); answered || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("with no temporary directory: answered %v, %v; want an unavailable error", answered, err)
	}
}

// TestFileAPIOffWhereTheKernelFollows: on a kernel that follows the symlink (as gVisor did,
// gvisor.dev/issue/14786; here an open without O_NOFOLLOW plays it), the check says so,
// and a service that was told refuses every operation with FailedPrecondition, naming the
// reason, and reads nothing through a symlink that leads out of the workspace.
func TestFileAPIOffWhereTheKernelFollows(t *testing.T) {
	following := func(dirfd int, name string) (int, error) {
		return unix.Openat(dirfd, name, unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	answered, unjailed := checkNoFollow(following)
	if !answered || !errors.Is(unjailed, errdefs.ErrFailedPrecondition) {
		t.Fatalf("a kernel that follows: got %v, want a FailedPrecondition", unjailed)
	}
	e := newEnv(t, func(s *Service) { s.unjailed = unjailed })
	must(t, os.Symlink(e.outside, filepath.Join(e.ws, "out")))
	must(t, os.WriteFile(filepath.Join(e.ws, "own.txt"), []byte("own"), 0o644))
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"stat own.txt": func() error { _, err := e.c.Stat(ctx, &agentv1.StatRequest{Path: "own.txt"}); return err },
		"list .":       func() error { _, err := e.c.List(ctx, &agentv1.ListFilesRequest{Path: "."}); return err },
		"read out/sentinel": func() error {
			stream, err := e.c.Read(ctx, &agentv1.ReadRequest{Path: "out/sentinel"})
			if err != nil {
				return err
			}
			_, err = stream.Recv()
			return err
		},
	} {
		err := call()
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "gvisor.dev/issue/14786") {
			t.Errorf("%s: got %v, want FailedPrecondition naming the kernel's fault", name, err)
		}
	}
	if got, _ := os.ReadFile(e.sentinel); string(got) != sentinelData {
		t.Errorf("the sentinel outside the workspace changed: %q", got)
	}
}
