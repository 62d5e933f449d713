package runner

import (
	"slices"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/agent/coder"
)

// The shared environment keeps the coding agent's state per sandbox, under the name the
// agent reads, and a sandbox's own environment wins over it.
func TestSharedEnv(t *testing.T) {
	if agentStateEnv != coder.EnvState {
		t.Errorf("agentStateEnv %q, the agent reads %q", agentStateEnv, coder.EnvState)
	}
	env := containerEnv(append(append([]string{}, sharedEnv...), "HOME=/workspace/me"))
	var homes []string
	for _, kv := range env {
		if strings.HasPrefix(kv, "HOME=") {
			homes = append(homes, kv)
		}
	}
	if !slices.Equal(homes, []string{"HOME=/workspace/me"}) {
		t.Errorf("HOME entries %q, want the sandbox's own only", homes)
	}
}
