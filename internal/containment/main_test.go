package containment

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
)

// hostCanaryName and hostCanaryValue are set in the test process's environment before any
// sandbox starts: every runc and agent process the suite starts could inherit them, and
// none of them may let them reach the sandbox.
var hostCanaryName, hostCanaryValue string

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == probeArg {
		os.Exit(helperMain(os.Args[2:]))
	}
	hostCanaryName = "PADDOCK_CANARY_" + randHex(6)
	hostCanaryValue = "host-secret-" + randHex(16)
	if err := os.Setenv(hostCanaryName, hostCanaryValue); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
