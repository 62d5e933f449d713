package testenv_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/testenv"
)

// lateChild names the child run of TestLogAfterTheLastTest.
const lateChild = "PADDOCK_TESTENV_LATE_LOG"

var (
	testsEnded = make(chan struct{}) // closed by TestMain once m.Run returns
	lateLogged = make(chan struct{}) // closed by the child's goroutine once it has logged
)

func TestMain(m *testing.M) {
	code := m.Run()
	close(testsEnded)
	if os.Getenv(lateChild) != "" {
		<-lateLogged
	}
	os.Exit(code)
}

// TestLogAfterTheLastTest: a logger from Logger that writes after every test of the binary
// has ended (as the informers of a runner on the test cluster do when TestMain stops the
// cluster) drops the line instead of ending the binary with testing's panic.
func TestLogAfterTheLastTest(t *testing.T) {
	if os.Getenv(lateChild) != "" {
		log := testenv.Logger(t)
		go func() {
			<-testsEnded
			log.Warn("the watch broke")
			close(lateLogged)
		}()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLogAfterTheLastTest$", "-test.count=1")
	cmd.Env = append(os.Environ(), lateChild+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), "panic") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}
