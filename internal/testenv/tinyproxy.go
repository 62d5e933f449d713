package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// StartTinyproxy runs tinyproxy (installed by scripts/setup.sh) on loopback as an
// operator's forward proxy, asking for user and password when user is set, and returns its URL (with the credentials) and the path of its log.
func StartTinyproxy(t testing.TB, user, password string) (string, string) {
	t.Helper()
	bin, err := exec.LookPath("tinyproxy")
	if err != nil {
		t.Fatal("tinyproxy is not installed: run scripts/setup.sh")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	logf := filepath.Join(dir, "tinyproxy.log")
	// No LogFile: in the foreground tinyproxy logs to its stderr, this file, which it
	// holds open after it drops to nobody.
	conf := fmt.Sprintf("User nobody\nGroup nogroup\nPort %d\nListen 127.0.0.1\nTimeout 60\nMaxClients 20\nLogLevel Connect\n", port)
	if user != "" {
		conf += fmt.Sprintf("BasicAuth %s %s\n", user, password)
	}
	if err := os.WriteFile(filepath.Join(dir, "tinyproxy.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(logf)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(bin, "-d", "-c", filepath.Join(dir, "tinyproxy.conf"))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tinyproxy did not listen on %d: %v", port, err)
		}
	}
	u := fmt.Sprintf("http://127.0.0.1:%d", port)
	if user != "" {
		u = fmt.Sprintf("http://%s:%s@127.0.0.1:%d", user, password, port)
	}
	return u, logf
}
