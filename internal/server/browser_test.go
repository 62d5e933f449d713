package server_test

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/browsertest"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
)

// A newcomer in a real browser: /register → recovery codes → their live sandbox's app,
// served from inside the sandbox, WebSocket included; then the dev role.
func TestBrowserNewcomer(t *testing.T) {
	e := servertest.Start(t)
	env := map[string]string{"BASE_URL": e.URL}
	if d := os.Getenv("SCREENSHOT_DIR"); d != "" {
		env["SCREENSHOT_DIR"] = d
	}
	out := browsertest.Run(t, "app", env)
	var live, dev string
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "live="); ok {
			live = v
		}
		if v, ok := strings.CutPrefix(line, "dev="); ok {
			dev = v
		}
	}
	// The IDs the pages showed are the user's roles as the API tells them.
	tok := e.Token(t, "newcomer", "correct horse battery staple")
	req, _ := http.NewRequest("GET", e.URL+"/api/v1/roles", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var roles api.Roles
	servertest.Decode(t, resp, http.StatusOK, &roles)
	if roles.Live.ID != live || roles.Dev.ID != dev {
		t.Errorf("the browser saw live=%s dev=%s; the API says live=%s dev=%s", live, dev, roles.Live.ID, roles.Dev.ID)
	}
}

// staticServer is a sandbox app that serves /workspace's files by name (perl is in every
// Debian system, as perl-base): the tests' stand-in for an agent-written site.
const staticServer = `use IO::Socket::INET;
$SIG{CHLD} = 'IGNORE';
my $s = IO::Socket::INET->new(LocalPort => 8080, Listen => 64, ReuseAddr => 1) or die "listen: $!";
while (1) {
  my $c = $s->accept or next;
  if (fork()) { close $c; next }
  alarm 30;
  my $req = <$c> // exit;
  while (my $l = <$c>) { last if $l =~ /^\r?\n$/ }
  my ($path) = $req =~ m{^\S+ /([^ ?]*)};
  $path =~ s/[^A-Za-z0-9._-]//g;
  my ($code, $type, $body) = ("404 Not Found", "text/plain", "not found\n");
  if ($path eq "") { ($code, $body) = ("200 OK", "a static site\n") }
  elsif (open(my $f, "<", "/workspace/$path")) { local $/; $body = <$f>; $code = "200 OK"; $type = "text/html" if $path =~ /\.html$/ }
  print $c "HTTP/1.0 $code\r\nContent-Type: $type\r\nContent-Length: " . length($body) . "\r\nConnection: close\r\n\r\n$body";
  close $c;
  exit;
}
`

// A hostile page served by a user's sandbox, in a real browser signed in as that user,
// tries to read the control plane's pages, mint a token, open a WebSocket to it, reach
// another user's apps host, frame the control plane and plant cookies: every attempt
// fails (tests/browser/hostile.mjs judges each), and no token was minted.
func TestBrowserHostilePage(t *testing.T) {
	static := []string{"/usr/bin/perl", "-e", staticServer}
	e := servertest.Start(t, func(c *server.Config) {
		c.App = server.AppConfig{Command: static, Port: 8080, Build: "static"}
	})
	alice := e.Register(t, "alice")
	bob := e.Register(t, "bob")
	var roles, bobRoles api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
	bob.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &bobRoles)
	page, err := os.ReadFile(filepath.Join("..", "..", "tests", "browser", "hostile.html"))
	if err != nil {
		t.Fatal(err)
	}
	put := func(c *servertest.Client, id, path string, body []byte) {
		servertest.Decode(t, c.DoToken("PUT", "/api/v1/sandboxes/"+id+"/files/content?path="+path, bytes.NewReader(body)), http.StatusOK, nil)
	}
	put(alice, roles.Live.ID, "hostile.html", page)
	put(bob, bobRoles.Live.ID, "bob-secret.txt", []byte("BOB-SECRET\n"))
	var bobSession string
	for _, c := range bob.HTTP.Jar.Cookies(mustURL(t, e.URL)) {
		if c.Name == "paddock_session" {
			bobSession = c.Value
		}
	}
	env := map[string]string{
		"BASE_URL": e.URL, "USERNAME": "alice", "PASSWORD": "correct horse battery alice",
		"HOSTILE_URL": e.URL + "/hostile.html", "OTHER_HOST": alice.AppURL("dev"),
		"BOB_LIVE": bob.AppURL("live"), "BOB_SESSION": bobSession,
		"SANDBOX": roles.Live.ID, "PROTO": api.StreamProtocol,
	}
	if d := os.Getenv("SCREENSHOT_DIR"); d != "" {
		env["SCREENSHOT_DIR"] = d
	}
	t.Log(browsertest.Run(t, "hostile", env))
	var toks api.TokenList
	servertest.Decode(t, alice.Do("GET", "/api/v1/tokens", nil), http.StatusOK, &toks)
	for _, tok := range toks.Tokens {
		if tok.Name != "tests" {
			t.Errorf("a token %q was minted", tok.Name)
		}
	}
	// The page did not change alice's password (which would also have revoked "tests").
	e.Token(t, "alice", "correct horse battery alice")
}

// crashingServer is staticServer that serves index.html at / and exits 3 at once, start
// after start, while /workspace/crash exists: the desktop test's app.
const crashingServer = `if (-e "/workspace/crash") { print STDERR "crashing on purpose: /workspace/crash exists\n"; exit 3 }
use IO::Socket::INET;
$SIG{CHLD} = 'IGNORE';
my $s = IO::Socket::INET->new(LocalPort => 8080, Listen => 64, ReuseAddr => 1) or die "listen: $!";
while (1) {
  my $c = $s->accept or next;
  if (-e "/workspace/crash") { print STDERR "crashing on purpose: /workspace/crash exists\n"; exit 3 }
  if (fork()) { close $c; next }
  alarm 30;
  my $req = <$c> // exit;
  while (my $l = <$c>) { last if $l =~ /^\r?\n$/ }
  my ($path) = $req =~ m{^\S+ /([^ ?]*)};
  $path =~ s/[^A-Za-z0-9._-]//g;
  $path = "index.html" if $path eq "";
  print STDERR "served /$path\n";
  my ($code, $type, $body) = ("404 Not Found", "text/plain", "not found\n");
  if (open(my $f, "<", "/workspace/$path")) { local $/; $body = <$f>; $code = "200 OK"; $type = "text/html" if $path =~ /\.html$/ }
  print $c "HTTP/1.0 $code\r\nContent-Type: $type\r\nCache-Control: no-store\r\nContent-Length: " . length($body) . "\r\nConnection: close\r\n\r\n$body";
  close $c;
  exit;
}
`

// The desktop in a real browser, each pane as a person uses it (tests/browser/desktop.mjs
// says what): files with a save conflict, terminal, preview, timeline undo, undo while the
// app crash-loops, and a page on the app's host that cannot drive the desktop. Screenshots
// of each pane go to a directory under the test's temp dir (SCREENSHOT_DIR/desktop when
// set); DESKTOP_DOC_SHOT=path copies the files pane's, with a conflict, to path (docs/desktop.png).
func TestBrowserDesktop(t *testing.T) {
	e := servertest.Start(t, func(c *server.Config) {
		c.App = server.AppConfig{Command: []string{"/usr/bin/perl", "-e", crashingServer}, Port: 8080, Build: "crashing"}
	})
	alice := e.Register(t, "alice")
	alice.Start()
	var roles api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
	shots := filepath.Join(t.TempDir(), "screenshots")
	if d := os.Getenv("SCREENSHOT_DIR"); d != "" {
		shots = filepath.Join(d, "desktop")
	}
	env := map[string]string{
		"BASE_URL": e.URL, "USERNAME": "alice", "PASSWORD": "correct horse battery alice",
		"SANDBOX": roles.Live.ID, "SHOTS": shots,
	}
	if d := os.Getenv("DESKTOP_DOC_SHOT"); d != "" {
		env["DOC_SHOT"] = d
	}
	t.Log(browsertest.Run(t, "desktop", env))
	for _, name := range []string{"files", "files-conflict", "terminal", "preview", "timeline", "preview-crashed", "desktop", "narrow"} {
		if _, err := os.Stat(filepath.Join(shots, name+".png")); err != nil {
			t.Errorf("no screenshot of %s: %v", name, err)
		}
	}
}

// dyingServer is crashingServer's static server, except that its first request for /die
// SIGKILLs the server and the child answering it, mid-request; later ones answer "back
// after the kill".
const dyingServer = `use IO::Socket::INET;
$SIG{CHLD} = 'IGNORE';
my $s = IO::Socket::INET->new(LocalPort => 8080, Listen => 64, ReuseAddr => 1) or die "listen: $!";
while (1) {
  my $c = $s->accept or next;
  if (fork()) { close $c; next }
  alarm 30;
  my $req = <$c> // exit;
  while (my $l = <$c>) { last if $l =~ /^\r?\n$/ }
  my ($path) = $req =~ m{^\S+ /([^ ?]*)};
  $path =~ s/[^A-Za-z0-9._-]//g;
  $path = "index.html" if $path eq "";
  if ($path eq "die" && ! -e "/workspace/.died") {
    open(my $m, ">", "/workspace/.died"); close $m;
    print STDERR "killed mid-request on purpose\n";
    kill 9, getppid(); kill 9, $$;
  }
  my ($code, $type, $body) = ("404 Not Found", "text/plain", "not found\n");
  if ($path eq "die") { ($code, $type, $body) = ("200 OK", "text/html", "<p>back after the kill</p>\n") }
  elsif (open(my $f, "<", "/workspace/$path")) { local $/; $body = <$f>; $code = "200 OK"; $type = "text/html" if $path =~ /\.html$/ }
  print $c "HTTP/1.0 $code\r\nContent-Type: $type\r\nCache-Control: no-store\r\nContent-Length: " . length($body) . "\r\nConnection: close\r\n\r\n$body";
  close $c;
  exit;
}
`

// The app SIGKILLed mid-request while the desktop's preview shows it: a precise message in
// the preview, which comes back by itself, and nothing lost in the desktop
// (tests/browser/desktop-appkill.mjs).
func TestBrowserDesktopAppKilled(t *testing.T) {
	e := servertest.Start(t, func(c *server.Config) {
		c.App = server.AppConfig{Command: []string{"/usr/bin/perl", "-e", dyingServer}, Port: 8080, Build: "dying"}
	})
	alice := e.Register(t, "alice")
	alice.Start()
	var roles api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
	env := map[string]string{
		"BASE_URL": e.URL, "USERNAME": "alice", "PASSWORD": "correct horse battery alice",
		"SANDBOX": roles.Live.ID,
	}
	if d := os.Getenv("SCREENSHOT_DIR"); d != "" {
		env["SCREENSHOT_DIR"] = d
	}
	t.Log(browsertest.Run(t, "desktop-appkill", env))
}

// The desktop's bad input and faults in a browser (tests/browser/desktop-faults.mjs): a
// path outside the workspace, the open file deleted before a save, a 1 MB paste, keys past
// the terminal's buffer while it is disconnected, a tab closed mid-upload.
func TestBrowserDesktopFaults(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	alice.Start()
	var roles api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
	env := map[string]string{
		"BASE_URL": e.URL, "USERNAME": "alice", "PASSWORD": "correct horse battery alice",
		"SANDBOX": roles.Live.ID,
	}
	if d := os.Getenv("SCREENSHOT_DIR"); d != "" {
		env["SCREENSHOT_DIR"] = d
	}
	t.Log(browsertest.Run(t, "desktop-faults", env))
}

// hangingServer is crashingServer's static server, except that it logs each request
// ("served /<path>") and while /workspace/hang exists a request finds it hung: it stops
// answering and ignores SIGTERM.
const hangingServer = `use IO::Socket::INET;
$SIG{CHLD} = 'IGNORE';
print STDERR "hanging server: listening on 8080\n";
my $s = IO::Socket::INET->new(LocalPort => 8080, Listen => 64, ReuseAddr => 1) or die "listen: $!";
while (1) {
  my $c = $s->accept or next;
  if (-e "/workspace/hang") { print STDERR "hung on purpose: /workspace/hang exists\n"; $SIG{TERM} = 'IGNORE'; sleep 1 while 1 }
  if (fork()) { close $c; next }
  alarm 30;
  my $req = <$c> // exit;
  while (my $l = <$c>) { last if $l =~ /^\r?\n$/ }
  my ($path) = $req =~ m{^\S+ /([^ ?]*)};
  $path =~ s/[^A-Za-z0-9._-]//g;
  $path = "index.html" if $path eq "";
  print STDERR "served /$path\n";
  my ($code, $type, $body) = ("404 Not Found", "text/plain", "not found\n");
  if (open(my $f, "<", "/workspace/$path")) { local $/; $body = <$f>; $code = "200 OK"; $type = "text/html" if $path =~ /\.html$/ }
  print $c "HTTP/1.0 $code\r\nContent-Type: $type\r\nCache-Control: no-store\r\nContent-Length: " . length($body) . "\r\nConnection: close\r\n\r\n$body";
  close $c;
  exit;
}
`

// The desktop's controls that TestBrowserDesktop does not click
// (tests/browser/desktop-panes.mjs): a binary, a read-only and a too-large file; Checkpoint
// now, Undo, Redo and Restore selected; Logs and Restart; undo while the app is hung.
func TestBrowserDesktopPanes(t *testing.T) {
	e := servertest.Start(t, func(c *server.Config) {
		c.App = server.AppConfig{Command: []string{"/usr/bin/perl", "-e", hangingServer}, Port: 8080, Build: "hanging"}
	})
	alice := e.Register(t, "alice")
	alice.Start()
	var roles api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
	env := map[string]string{
		"BASE_URL": e.URL, "USERNAME": "alice", "PASSWORD": "correct horse battery alice",
		"SANDBOX": roles.Live.ID,
	}
	if d := os.Getenv("SCREENSHOT_DIR"); d != "" {
		env["SCREENSHOT_DIR"] = d
	}
	t.Log(browsertest.Run(t, "desktop-panes", env))
}

// The desktop's Build pane runs a provider's step and shows its commands and log while it
// runs (tests/browser/desktop-build.mjs): the build's first line is on the page before the
// build, which waits for a file the page makes, can end.
func TestBrowserDesktopBuild(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	alice.Start()
	var roles api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
	execOK(t, alice, roles.Live.ID, "sh", "-c", `mkdir app && echo '{"scripts": {"build": "echo building: first line; while [ ! -f go ]; do sleep 0.1; done; echo building: done"}}' > app/package.json`)
	env := map[string]string{
		"BASE_URL": e.URL, "USERNAME": "alice", "PASSWORD": "correct horse battery alice",
		"SANDBOX": roles.Live.ID, "GATE": "app/go",
	}
	if d := os.Getenv("SCREENSHOT_DIR"); d != "" {
		env["SCREENSHOT_DIR"] = d
	}
	out := browsertest.Run(t, "desktop-build", env)
	if !strings.Contains(out, "desktop-build=ok") {
		t.Errorf("desktop-build.mjs: %s", out)
	}
	t.Log(out)
}
