package wire

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/paddockhq/paddock/"

// deps lists the packages pkg links, by go list, built with tags.
func deps(t *testing.T, pkg, tags string) []string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command, to list dependencies: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", "-tags", tags, pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps -tags %q %s: %v", tags, pkg, err)
	}
	return strings.Fields(string(out))
}

// The control plane and CLI speak to the agent through this contract only: the paddock
// and paddock-server binaries link none of the agent's code, with or without the build
// tags of the optional tiers. Any package whose path begins internal/agent counts: a
// reader (or a check) that sees the prefix takes it for the agent's.
func TestHostLinksNoAgent(t *testing.T) {
	for _, tags := range []string{"", "microvm kube"} {
		for _, cmd := range []string{"cmd/paddock", "cmd/paddock-server"} {
			for _, p := range deps(t, module+cmd, tags) {
				if strings.HasPrefix(p, module+"internal/agent") {
					t.Errorf("%s (tags %q) links %s: what both sides need belongs in internal/wire", cmd, tags, p)
				}
			}
		}
	}
}

// The contract depends on neither side: of paddock's packages it links only its own and
// the error taxonomy.
func TestContractStandsAlone(t *testing.T) {
	for _, p := range deps(t, module+"internal/wire/...", "") {
		rest, ok := strings.CutPrefix(p, module)
		if ok && rest != "internal/errdefs" && rest != "internal/wire" && !strings.HasPrefix(rest, "internal/wire/") {
			t.Errorf("internal/wire links %s", p)
		}
	}
}
