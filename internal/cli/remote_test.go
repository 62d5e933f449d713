package cli_test

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/cli"
	"github.com/paddockhq/paddock/internal/cli/servercmd"
	"github.com/paddockhq/paddock/internal/servertest"
)

// remote runs the CLI in this process, as a user would run it against a server.
func remote(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = servercmd.Main(args, strings.NewReader(stdin), &out, &errb)
	if s := errb.String(); strings.Contains(s, "goroutine ") || strings.Contains(s, "panic") {
		t.Fatalf("paddock %s: stack trace on stderr:\n%s", strings.Join(args, " "), s)
	}
	return out.String(), errb.String(), code
}

// mustRemote runs the CLI and fails the test unless it exits 0.
func mustRemote(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, errOut, code := remote(t, stdin, args...)
	if code != 0 {
		t.Fatalf("paddock %s: exit %d, stderr %q, stdout %q", strings.Join(args, " "), code, errOut, out)
	}
	return out
}

// wantFailure checks that the CLI exited 125 with one line on stderr that contains want.
func wantFailure(t *testing.T, stdin, want string, args ...string) {
	t.Helper()
	out, errOut, code := remote(t, stdin, args...)
	t.Logf("paddock %s: %s", strings.Join(args, " "), strings.TrimSpace(errOut))
	if code != cli.ExitUsage {
		t.Errorf("paddock %s: exit %d, want %d (stdout %q, stderr %q)", strings.Join(args, " "), code, cli.ExitUsage, out, errOut)
	}
	if !strings.HasPrefix(errOut, "paddock: ") || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, want) {
		t.Errorf("paddock %s: stderr %q, want one line \"paddock: …%s…\"", strings.Join(args, " "), errOut, want)
	}
}

// signedOut gives the test an empty configuration directory and no PADDOCK_* overrides.
func signedOut(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, "config"))
	t.Setenv("PADDOCK_SERVER", "")
	t.Setenv("PADDOCK_TOKEN", "")
	return filepath.Join(home, "config", "paddock", "credentials.json")
}

func TestRemote(t *testing.T) {
	e := servertest.Start(t)
	e.Register(t, "alice")
	bob := e.Register(t, "bob")
	password := "correct horse battery alice" // servertest.Register's
	creds := signedOut(t)

	t.Run("signed out", func(t *testing.T) {
		wantFailure(t, "", "run paddock login", "sandbox", "ls")
		wantFailure(t, "", "run paddock login", "roles")
		out := mustRemote(t, "", "logout")
		if out != "not signed in\n" {
			t.Errorf("logout while signed out: %q", out)
		}
	})

	t.Run("login", func(t *testing.T) {
		wantFailure(t, "not the password\n", "", "login", "--username", "alice", "--password-stdin", e.URL)
		_, errOut, _ := remote(t, "not the password\n", "login", "--username", "alice", "--password-stdin", e.URL)
		if strings.Contains(errOut, "run paddock login") {
			t.Errorf("a wrong password tells the user to run the command they ran: %q", errOut)
		}
		wantFailure(t, password+"\n", "needs --username", "login", "--password-stdin", e.URL)
		wantFailure(t, "", "want http(s)://", "login", "ftp://example.com")
		if _, err := os.Stat(creds); !os.IsNotExist(err) {
			t.Fatalf("a failed login left credentials: %v", err)
		}

		// A username and password, a line each, from a pipe.
		out := mustRemote(t, "alice\n"+password+"\n", "login", e.URL+"/")
		if want := "signed in to " + e.URL + " as alice\n"; out != want {
			t.Errorf("login: %q, want %q", out, want)
		}
		first := readCreds(t, creds)
		out = mustRemote(t, password+"\n", "login", "--username", "alice", "--password-stdin", e.URL)
		if want := "signed in to " + e.URL + " as alice\n"; out != want {
			t.Errorf("login --password-stdin: %q, want %q", out, want)
		}
		c := readCreds(t, creds)
		if c["server"] != e.URL || c["username"] != "alice" || c["token"] == "" || c["token"] == first["token"] {
			t.Errorf("credentials file: server %q username %q, token set %v, new %v", c["server"], c["username"], c["token"] != "", c["token"] != first["token"])
		}
		for path, want := range map[string]os.FileMode{creds: 0o600, filepath.Dir(creds): 0o700} {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != want {
				t.Errorf("%s: mode %o, want %o", path, fi.Mode().Perm(), want)
			}
		}
		// The first login's token is still valid until revoked; revoke it like logout
		// would, through the CLI's own credentials file.
		writeCreds(t, creds, first)
		mustRemote(t, "", "logout")
		if _, err := os.Stat(creds); !os.IsNotExist(err) {
			t.Errorf("logout left the credentials file: %v", err)
		}
		t.Setenv("PADDOCK_SERVER", e.URL)
		t.Setenv("PADDOCK_TOKEN", first["token"])
		wantFailure(t, "", "run paddock login", "sandbox", "ls")
		t.Setenv("PADDOCK_SERVER", "")
		t.Setenv("PADDOCK_TOKEN", "")
		writeCreds(t, creds, c)
	})

	t.Run("login on a terminal", func(t *testing.T) { loginOnTerminal(t, e.URL, password) })

	var id string
	t.Run("create ls get", func(t *testing.T) {
		out := mustRemote(t, "", "sandbox", "create", "--name", "scratch", "--memory", "256M", "--env", "GREETING=hello")
		id = strings.TrimSpace(out)
		if !strings.HasPrefix(id, "sb") || strings.Contains(id, "\n") {
			t.Fatalf("sandbox create printed %q, want one ID", out)
		}
		out = mustRemote(t, "", "sandbox", "ls")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if !regexp.MustCompile(`^ID\s+NAME\s+ROLE\s+STATE\s+TIER\s+MEMORY\s+AGE$`).MatchString(lines[0]) {
			t.Errorf("sandbox ls header: %q", lines[0])
		}
		if !regexp.MustCompile(`(?m)^` + id + `\s+scratch\s+-\s+running\s+container\s+256M\s+\d+s$`).MatchString(out) {
			t.Errorf("sandbox ls: no running row for %s:\n%s", id, out)
		}
		var sb api.Sandbox
		if err := json.Unmarshal([]byte(mustRemote(t, "", "sandbox", "get", id)), &sb); err != nil {
			t.Fatal(err)
		}
		if sb.ID != id || sb.Name != "scratch" || sb.State != api.StateRunning || sb.Limits.MemoryBytes != 256<<20 || sb.OwnerName != "alice" {
			t.Errorf("sandbox get: %+v", sb)
		}
	})
	if id == "" {
		t.Fatal("no sandbox to go on with")
	}

	t.Run("exec", func(t *testing.T) {
		for _, tc := range []struct {
			name, stdin    string
			args           []string
			stdout, stderr string
			code           int
		}{
			{"streams apart", "", []string{"--", "sh", "-c", "echo out; echo err >&2; exit 3"}, "out\n", "err\n", 3},
			{"stdin", "piped\nthrough\n", []string{"--", "cat"}, "piped\nthrough\n", "", 0},
			{"sandbox env", "", []string{"--", "sh", "-c", `echo "$GREETING"`}, "hello\n", "", 0},
			// A command given an environment gets only that one (the agent's rule), so
			// this names the shell by its path: there is no PATH.
			{"env", "", []string{"--env", "A=b", "--", "/bin/sh", "-c", `echo "$A"`}, "b\n", "", 0},
			{"workdir", "", []string{"--workdir", "/tmp", "--", "sh", "-c", `pwd`}, "/tmp\n", "", 0},
			{"signal", "", []string{"--", "sh", "-c", "kill -9 $$"}, "", "", 137},
			{"timeout", "", []string{"--timeout", "1s", "--", "sleep", "30"}, "", "paddock: timed out after 1s\n", 124},
			{"missing command", "", []string{"--", "/no/such/command"}, "", "", 127},
		} {
			t.Run(tc.name, func(t *testing.T) {
				out, errOut, code := remote(t, tc.stdin, append([]string{"sandbox", "exec", id}, tc.args...)...)
				if code != tc.code || out != tc.stdout || (tc.code != 127 && errOut != tc.stderr) {
					t.Errorf("exec %q: exit %d stdout %q stderr %q, want %d %q %q", tc.args, code, out, errOut, tc.code, tc.stdout, tc.stderr)
				}
			})
		}
	})

	t.Run("shell without a terminal", func(t *testing.T) {
		out, errOut, code := remote(t, "echo hi\necho oops >&2\nexit 7\n", "sandbox", "shell", id)
		if code != 7 || !strings.Contains(out, "hi\n") || strings.Contains(out, "oops") || !strings.Contains(errOut, "oops") {
			t.Errorf("shell: exit %d stdout %q stderr %q, want 7, hi on stdout, oops on stderr", code, out, errOut)
		}
		out, _, code = remote(t, "one\ntwo\n", "sandbox", "shell", id, "--", "wc", "-l")
		if code != 0 || strings.TrimSpace(out) != "2" {
			t.Errorf("shell -- wc -l: exit %d stdout %q (stdin not closed at its end?)", code, out)
		}
	})

	t.Run("shell on a terminal", func(t *testing.T) { shellOnTerminal(t, id) })

	t.Run("errors", func(t *testing.T) {
		wantFailure(t, "", "unknown flag: --bogus", "sandbox", "ls", "--bogus")
		wantFailure(t, "", "want ID", "sandbox", "get")
		wantFailure(t, "", "want ID and a COMMAND", "sandbox", "exec", id)
		wantFailure(t, "", "not found", "sandbox", "get", "sb-aaaaaaaaaa")
		wantFailure(t, "", `"lots" is not a size`, "sandbox", "create", "--memory", "lots")
		// Another user's sandbox is not found, as a missing one is.
		t.Setenv("PADDOCK_TOKEN", bob.Token)
		wantFailure(t, "", "not found", "sandbox", "get", id)
		wantFailure(t, "", "not found", "sandbox", "exec", id, "--", "true")
		wantFailure(t, "", "not found", "sandbox", "shell", id, "--", "true")
		wantFailure(t, "", "not found", "sandbox", "rm", id)
		t.Setenv("PADDOCK_TOKEN", "pdk_not_a_token")
		wantFailure(t, "", "run paddock login", "sandbox", "ls")
		t.Setenv("PADDOCK_TOKEN", "")
		// Nothing printed carries the token.
		tok := readCreds(t, creds)["token"]
		for _, args := range [][]string{{"sandbox", "ls"}, {"roles"}, {"sandbox", "get", id}} {
			out, errOut, _ := remote(t, "", args...)
			if strings.Contains(out+errOut, tok) {
				t.Errorf("paddock %s printed the token", strings.Join(args, " "))
			}
		}
	})

	t.Run("lifecycle", func(t *testing.T) {
		if out := mustRemote(t, "", "sandbox", "stop", id); out != id+" stopped\n" {
			t.Errorf("stop: %q", out)
		}
		wantFailure(t, "", "", "sandbox", "exec", id, "--", "true")
		if out := mustRemote(t, "", "sandbox", "start", id); out != id+" running\n" {
			t.Errorf("start: %q", out)
		}
		if out := mustRemote(t, "", "sandbox", "restart", id); out != id+" running\n" {
			t.Errorf("restart: %q", out)
		}
		if out := mustRemote(t, "", "sandbox", "exec", id, "--", "echo", "back"); out != "back\n" {
			t.Errorf("exec after restart: %q", out)
		}
		if out := mustRemote(t, "", "sandbox", "rm", id); out != id+"\n" {
			t.Errorf("rm: %q", out)
		}
		wantFailure(t, "", "not found", "sandbox", "get", id)
		out, errOut, code := remote(t, "", "sandbox", "rm", id, "sb-aaaaaaaaaa")
		if code != cli.ExitUsage || strings.Count(errOut, "not found\n") != 2 || !strings.HasSuffix(errOut, "paddock: 2 of 2 sandboxes not removed\n") || out != "" {
			t.Errorf("rm of two missing sandboxes: exit %d stdout %q stderr %q", code, out, errOut)
		}
	})

	t.Run("roles and promote", func(t *testing.T) {
		live, dev := roles(t)
		if live == "" || dev == "" || live == dev {
			t.Fatalf("roles: live %q dev %q", live, dev)
		}
		out := mustRemote(t, "", "promote")
		if want := "swapped: live is now " + dev + ", dev is now " + live + "\n"; out != want {
			t.Errorf("promote: %q, want %q", out, want)
		}
		if l, d := roles(t); l != dev || d != live {
			t.Errorf("after promote: live %s dev %s, want %s %s", l, d, dev, live)
		}
		out = mustRemote(t, "", "sandbox", "ls")
		if !regexp.MustCompile(`(?m)^` + dev + `\s+\S+\s+live\s`).MatchString(out) {
			t.Errorf("sandbox ls does not show %s as live:\n%s", dev, out)
		}
	})

	t.Run("logout", func(t *testing.T) {
		tok := readCreds(t, creds)["token"]
		if out := mustRemote(t, "", "logout"); out != "signed out of "+e.URL+"\n" {
			t.Errorf("logout: %q", out)
		}
		if _, err := os.Stat(creds); !os.IsNotExist(err) {
			t.Errorf("credentials file after logout: %v", err)
		}
		wantFailure(t, "", "run paddock login", "sandbox", "ls")
		// The token was revoked, not just forgotten.
		t.Setenv("PADDOCK_SERVER", e.URL)
		t.Setenv("PADDOCK_TOKEN", tok)
		wantFailure(t, "", "run paddock login", "sandbox", "ls")
	})
}

func roles(t *testing.T) (live, dev string) {
	t.Helper()
	out := mustRemote(t, "", "roles")
	m := regexp.MustCompile(`(?m)^live\s+(\S+)\s+running\ndev\s+(\S+)\s+running\ngeneration \d+\n`).FindStringSubmatch(strings.SplitN(out, "\n", 2)[1])
	if m == nil {
		t.Fatalf("roles: %q", out)
	}
	return m[1], m[2]
}

func readCreds(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]string
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func writeCreds(t *testing.T, path string, c map[string]string) {
	t.Helper()
	data, _ := json.Marshal(c)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// loginOnTerminal signs in at a terminal: prompts, and the password not echoed.
func loginOnTerminal(t *testing.T, url, password string) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	defer tty.Close()
	screen := record(ptmx)
	var out bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- cli.Main([]string{"login", url}, tty, &out, tty) }()
	waitFor(t, func() bool { return screen.has("Username: ") }, "the username prompt")
	io.WriteString(ptmx, "alice\r")
	waitFor(t, func() bool { return screen.has("Password: ") }, "the password prompt")
	io.WriteString(ptmx, password+"\r")
	select {
	case code := <-done:
		if code != 0 || out.String() != "signed in to "+url+" as alice\n" {
			t.Errorf("login on a terminal: exit %d, stdout %q, screen %q", code, out.String(), screen.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("login on a terminal did not finish")
	}
	if strings.Contains(screen.String(), "battery") {
		t.Errorf("the password was echoed: %q", screen.String())
	}
	if tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS); err != nil || tio.Lflag&unix.ECHO == 0 {
		t.Errorf("echo not turned back on: %v", err)
	}
}

// screen is what a terminal shows: everything read from its master side.
type screen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func record(ptmx *os.File) *screen {
	s := &screen{}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			s.mu.Lock()
			s.buf.Write(buf[:n])
			s.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return s
}

func (s *screen) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.buf.String() }

func (s *screen) has(text string) bool { return strings.Contains(s.String(), text) }

// shellOnTerminal runs sandbox shell on a pseudo-terminal, as a user at a terminal would.
func shellOnTerminal(t *testing.T, id string) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	defer tty.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 33, Cols: 101}); err != nil {
		t.Fatal(err)
	}
	before, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	screen := record(ptmx)
	seen := screen.has
	done := make(chan int, 1)
	go func() { done <- cli.Main([]string{"sandbox", "shell", id, "--", "sh"}, tty, tty, tty) }()
	waitFor(t, func() bool { return seen("#") || seen("$") }, "a prompt")
	io.WriteString(ptmx, "echo $((6*7)); tty; stty size\r")
	waitFor(t, func() bool { return seen("42") && seen("33 101") }, "the command's output at the terminal's size")
	// The terminal grows: the CLI passes SIGWINCH's new size on.
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	unix.Kill(os.Getpid(), unix.SIGWINCH)
	time.Sleep(200 * time.Millisecond)
	io.WriteString(ptmx, "stty size\r")
	waitFor(t, func() bool { return seen("40 120") }, "the new size")
	io.WriteString(ptmx, "exit 5\r")
	select {
	case code := <-done:
		if code != 5 {
			t.Errorf("shell on a terminal: exit %d, want 5; screen:\n%s", code, screen.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("shell on a terminal did not exit")
	}
	if !screen.has("/dev/pts/") {
		t.Errorf("the command had no terminal; screen:\n%s", screen.String())
	}
	after, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag {
		t.Errorf("terminal not restored: lflag %#x→%#x iflag %#x→%#x oflag %#x→%#x", before.Lflag, after.Lflag, before.Iflag, after.Iflag, before.Oflag, after.Oflag)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
