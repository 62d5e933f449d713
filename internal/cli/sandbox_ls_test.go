package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
)

// TestSandboxListShowsNodes: `paddock sandbox ls` has a NODE column when sandboxes run on
// cluster nodes, with each one's node (a dash for one not running), and none on one host.
func TestSandboxListShowsNodes(t *testing.T) {
	now := time.Now()
	list := []api.Sandbox{
		{ID: "sb-aaaaaaaaaa", State: "running", Tier: "container", Node: "node-1", CreatedAt: now},
		{ID: "sb-bbbbbbbbbb", State: "stopped", Tier: "container", CreatedAt: now},
	}
	var out bytes.Buffer
	printSandboxes(&out, list, false, now)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if f := strings.Fields(lines[0]); f[len(f)-1] != "NODE" {
		t.Fatalf("header %q, want a NODE column", lines[0])
	}
	if f := strings.Fields(lines[1]); f[len(f)-1] != "node-1" {
		t.Fatalf("running sandbox: %q", lines[1])
	}
	if f := strings.Fields(lines[2]); f[len(f)-1] != "-" {
		t.Fatalf("stopped sandbox: %q", lines[2])
	}
	out.Reset()
	list[0].Node = ""
	printSandboxes(&out, list, false, now)
	if strings.Contains(out.String(), "NODE") {
		t.Fatalf("a NODE column on one host:\n%s", out.String())
	}
}
