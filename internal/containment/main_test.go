package containment

import (
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"testing"
)

// ociRuntime is the OCI runtime the suite's sandboxes run under: runc (the default, what
// `go test ./...` runs) or runsc (gVisor; `make test` runs the suite a second time with
// `-args -runtime=runsc`). Where a probe's answer differs between the two, the check says
// why beside it; where a test has nothing to test under one of them, it skips saying why.
var ociRuntime = flag.String("runtime", "runc", "OCI runtime of the suite's sandboxes: runc or runsc")

// underRunsc reports whether the sandboxes run on gVisor's kernel.
func underRunsc() bool { return *ociRuntime == "runsc" }

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
