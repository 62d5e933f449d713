package runner_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/testenv"
	"github.com/paddockhq/paddock/internal/wire"
)

// A workspace on a filesystem that cannot be idmapped (procfs here) fails the sandbox's
// start with runc's reason and the way out.
func TestWorkspaceThatCannotBeIdmapped(t *testing.T) {
	testenv.RequireRoot(t)
	cfg := testenv.Config(t)
	if !cfg.UserNS() {
		t.Skip("user namespaces are off in this configuration")
	}
	r := runner.New(cfg, testenv.Logger(t))
	sb, err := r.Create(tctx(t), runner.Spec{User: "erin", Tier: wire.TierContainer, Workspace: "/proc/sys/fs", Main: []string{"true"}})
	if err == nil {
		sb.Destroy(tctx(t))
		t.Fatal("a sandbox started with a procfs workspace under a user namespace")
	}
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "MOUNT_ATTR_IDMAP") || !strings.Contains(err.Error(), "user_namespace: false") {
		t.Errorf("got %v, want runc's reason and the way out (user_namespace: false)", err)
	}
}
