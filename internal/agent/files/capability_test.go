package files

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/paddockhq/paddock/internal/capability"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/policy"
	"github.com/paddockhq/paddock/internal/wire/agentv1"
)

// TestWhere: an open file is placed by the kernel's account of it, under /workspace; a
// file outside the workspace or unlinked since it was opened has no place there.
func TestWhere(t *testing.T) {
	e := newEnv(t)
	e.plant(t, "d/f", "gone")
	for _, tc := range []struct{ rel, want string }{{".", "/workspace"}, {"d", "/workspace/d"}, {"d/f", "/workspace/d/f"}} {
		f, err := e.svc.root.Open(tc.rel)
		must(t, err)
		got, err := e.svc.where(f)
		f.Close()
		if err != nil || got != tc.want {
			t.Errorf("where(%s) = %q, %v; want %q", tc.rel, got, err, tc.want)
		}
	}
	out, err := os.Open(e.sentinel)
	must(t, err)
	defer out.Close()
	if got, err := e.svc.where(out); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("where(a file outside the workspace) = %q, %v; want permission denied", got, err)
	}
	gone, err := e.svc.root.Open("gone")
	must(t, err)
	defer gone.Close()
	must(t, e.svc.root.Remove("gone"))
	if got, err := e.svc.where(gone); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("where(an unlinked file) = %q, %v; want not found", got, err)
	}
}

// TestTokenWithoutGuard: a service that verifies no tokens refuses a request that carries
// one, rather than act as if it had none.
func TestTokenWithoutGuard(t *testing.T) {
	e := newEnv(t)
	e.plant(t, "f")
	_, err := e.c.Remove(ctxT(t), &agentv1.RemoveRequest{Path: "f", Capability: "pdk1.x"})
	e.wantCode(t, err, codes.FailedPrecondition)
	if _, err := os.Lstat(e.host("f")); err != nil {
		t.Fatalf("f was removed: %v", err)
	}
}

// refuseAll is a Guard that refuses everything, and counts what it was asked.
type refuseAll struct{ asked []string }

func (g *refuseAll) Allow(_ context.Context, gr Grant, action capability.Action, op policy.Op, path string, _ int64) (int64, error) {
	g.asked = append(g.asked, string(action)+" "+op.String()+" "+path+" "+gr.Token+gr.Policy)
	return 0, errdefs.ErrPermissionDenied
}

// TestGuardSeesOnlyGrants: a request with neither a token nor a policy is not shown to
// the guard; one with either is, with the policy's name for the operation.
func TestGuardSeesOnlyGrants(t *testing.T) {
	g := &refuseAll{}
	e := newEnv(t, func(s *Service) { s.GuardWith(g) })
	e.plant(t, "f")
	_, err := e.c.Mkdir(ctxT(t), &agentv1.MkdirRequest{Path: "d"})
	must(t, err)
	_, err = e.c.Mkdir(ctxT(t), &agentv1.MkdirRequest{Path: "d2", Capability: "pdk1.x"})
	e.wantCode(t, err, codes.PermissionDenied)
	_, err = e.c.Remove(ctxT(t), &agentv1.RemoveRequest{Path: "f", Policy: "files: {}"})
	e.wantCode(t, err, codes.PermissionDenied)
	if want := []string{"write mkdir /workspace/d2 pdk1.x", "delete delete /workspace/f files: {}"}; !slices.Equal(g.asked, want) {
		t.Fatalf("the guard was asked %q, want %q", g.asked, want)
	}
}
