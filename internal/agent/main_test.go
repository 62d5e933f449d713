package agent

import (
	"fmt"
	"os"
	"testing"

	"github.com/paddockhq/paddock/internal/agent/session"
)

// TestMain lets the test binary be the agent's trampoline, as paddock-agent is in a
// sandbox: gated commands start through it.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == session.LimitedExecFlag {
		code, err := session.ExecLimited(os.Args[2:])
		fmt.Fprintf(os.Stderr, "paddock-agent: %v\n", err)
		os.Exit(code)
	}
	os.Exit(m.Run())
}
