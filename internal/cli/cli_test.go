package cli_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/testenv"
)

// runConfig writes a runner configuration for paddock run under a temporary directory,
// and returns its path with the configuration.
func runConfig(t *testing.T) (string, runner.Config) {
	t.Helper()
	cfg := testenv.Config(t)
	conf := filepath.Join(t.TempDir(), "paddock.yaml")
	yaml := "data_dir: " + cfg.DataDir + "\nstate_dir: " + cfg.StateDir + "\nagent: " + cfg.Agent + "\n"
	if err := os.WriteFile(conf, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return conf, cfg
}

// paddock runs the real binary with a configuration under a temporary directory.
func paddock(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	if len(args) > 0 && args[0] == "run" {
		conf, _ := runConfig(t)
		args = append([]string{"run", "--config", conf}, args[1:]...)
	}
	return paddockAs(t, stdin, args...)
}

// paddockAs runs the real binary with args as they are.
func paddockAs(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(testenv.Binary(t, "paddock"), args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if s := errb.String(); strings.Contains(s, "goroutine ") || strings.Contains(s, "panic") {
		t.Fatalf("stack trace on stderr:\n%s", s)
	}
	return out.String(), errb.String(), code
}

func TestRunContract(t *testing.T) {
	testenv.RequireRoot(t)
	tests := []struct {
		name      string
		stdin     string
		args      []string
		stdout    string
		stderrHas string
		code      int
	}{
		{"hello", "", []string{"run", "--", "sh", "-c", "echo hello; id -u"}, "hello\n1000\n", "", 0},
		{"stdin", "data\n", []string{"run", "--", "wc", "-c"}, "5\n", "", 0},
		{"own exit code", "", []string{"run", "--", "sh", "-c", "exit 42"}, "", "", 42},
		{"signal", "", []string{"run", "--", "sh", "-c", "kill -KILL $$"}, "", "", 137},
		{"timeout", "", []string{"run", "--timeout", "1s", "--", "sleep", "20"}, "", "paddock: timed out after 1s", 124},
		{"out of memory", "", []string{"run", "--memory", "64M", "--", "sh", "-c", `x=$(head -c 200000000 /dev/zero | tr '\0' a)`}, "", "paddock: out of memory (limit 64MiB)", 137},
		{"env", "", []string{"run", "--env", "A=1", "--env", "B=two words", "--", "sh", "-c", `echo "$A $B"`}, "1 two words\n", "", 0},
		{"insecure tier says so", "", []string{"run", "--tier", "process", "--insecure", "--", "echo", "hi"}, "hi\n", "paddock: warn: DEGRADED: process tier (--insecure)", 0},
		{"not found", "", []string{"run", "--", "no-such-cmd"}, "", "no-such-cmd: command not found", 127},
		{"no command", "", []string{"run"}, "", "paddock: run: no command given", 125},
		{"unknown flag", "", []string{"run", "--bogus", "--", "true"}, "", "unknown flag: --bogus", 125},
		{"bad memory", "", []string{"run", "--memory", "lots", "--", "true"}, "", `--memory: "lots" is not a size`, 125},
		{"bad cpus", "", []string{"run", "--cpus", "-1", "--", "true"}, "", "--cpus", 125},
		{"bad tier", "", []string{"run", "--tier", "vm", "--", "true"}, "", `unknown tier "vm"`, 125},
		{"process without insecure", "", []string{"run", "--tier", "process", "--", "true"}, "", "pass --insecure", 125},
		{"insecure with container", "", []string{"run", "--tier", "container", "--insecure", "--", "true"}, "", "cannot be combined", 125},
		{"runsc is gVisor", "", []string{"run", "--runtime", "runsc", "--", "sh", "-c", "uname -r | grep -o gvisor; id -u"}, "gvisor\n1000\n", "", 0},
		{"runsc out of memory", "", []string{"run", "--runtime", "runsc", "--memory", "64M", "--", "sh", "-c", `x=$(head -c 200000000 /dev/zero | tr '\0' a)`}, "", "paddock: out of memory (limit 64MiB)", 137},
		{"microvm has its own kernel", "in\n", []string{"run", "--tier", "microvm", "--", "sh", "-c", "uname -r | grep -c -- '-amd64$'; cat; id -u"}, "1\nin\n1000\n", "", 0},
		{"unknown runtime", "", []string{"run", "--runtime", "kata", "--", "true"}, "", "want runc or runsc", 125},
		{"bad env", "", []string{"run", "--env", "NOVALUE", "--", "true"}, "", "--env \"NOVALUE\"", 125},
		{"missing workspace", "", []string{"run", "--workspace", "/nonexistent/dir", "--", "true"}, "", "--workspace /nonexistent/dir", 125},
		{"system workspace", "", []string{"run", "--workspace", "/etc", "--", "true"}, "", "system directory", 125},
		{"tiny memory", "", []string{"run", "--memory", "1k", "--", "true"}, "", "memory: 1KiB is below", 125},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := paddock(t, tt.stdin, tt.args...)
			if stdout != tt.stdout || code != tt.code || !strings.Contains(stderr, tt.stderrHas) {
				t.Fatalf("stdout %q stderr %q exit %d; want stdout %q, stderr containing %q, exit %d", stdout, stderr, code, tt.stdout, tt.stderrHas, tt.code)
			}
			if code == 125 && strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
				t.Fatalf("exit 125 must come with a one-line reason, got:\n%s", stderr)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	stdout, _, code := paddock(t, "", "version")
	if code != 0 || !strings.HasPrefix(stdout, "paddock ") {
		t.Fatalf("version: %q exit %d", stdout, code)
	}
}

// Ctrl-C on paddock reaches the command (here trapped, so it can say so), and the exit
// status is the command's.
func TestRunForwardsSignals(t *testing.T) {
	testenv.RequireRoot(t)
	conf, _ := runConfig(t)
	cmd := exec.Command(testenv.Binary(t, "paddock"), "run", "--config", conf, "--",
		"sh", "-c", `trap 'echo got INT; exit 130' INT; echo ready; while :; do sleep 0.1; done`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("first output %q, %v (stderr %q)", buf, err, errb.String())
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(out)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 || string(rest) != "got INT\n" {
		t.Fatalf("after SIGINT: output %q, %v (stderr %q); want the command's trap and exit 130", rest, err, errb.String())
	}
}

// Without QEMU, --tier microvm fails at once and says what to install.
func TestMicroVMNotInstalled(t *testing.T) {
	testenv.RequireRoot(t)
	conf, _ := runConfig(t)
	cmd := exec.Command(testenv.Binary(t, "paddock"), "run", "--config", conf, "--tier", "microvm", "--", "true")
	cmd.Env = []string{"PATH=/nonexistent"} // no qemu-system-x86_64 on it
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 125 || !strings.Contains(errb.String(), "install Debian's qemu-system-x86") {
		t.Fatalf("microvm without qemu: %v, stderr %q; want exit 125 saying what to install", err, errb.String())
	}
}
