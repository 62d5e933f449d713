// Package pgtest starts a real PostgreSQL server for a test package: initdb into a
// temporary directory, the server listening on a unix socket in that directory only (no
// TCP), one server per test binary, a fresh database per test.
//
// The server runs as an unprivileged user when the tests run as root (PostgreSQL refuses
// root): the postgres user that Debian's package makes, or $PADDOCK_PG_USER. It is
// watched by a small shell that stops it and removes its directory as soon as the test
// binary is gone (it waits for its standard input to close), so that a failed, panicked
// or killed test run leaves nothing behind.
package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// BinDir returns the directory of PostgreSQL's server binaries (initdb, postgres):
// $PADDOCK_PG_BINDIR, else the newest /usr/lib/postgresql/N/bin (Debian's layout), else
// the directory of initdb on $PATH. The error says what is missing.
func BinDir() (string, error) {
	if d := os.Getenv("PADDOCK_PG_BINDIR"); d != "" {
		return d, hasBinaries(d)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if hasBinaries(d) == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		d := filepath.Dir(p)
		return d, hasBinaries(d)
	}
	return "", errors.New("the PostgreSQL server binaries (initdb, postgres) are absent: install Debian's postgresql-15 (scripts/setup.sh does) or set PADDOCK_PG_BINDIR")
}

func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func hasBinaries(dir string) error {
	for _, b := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return fmt.Errorf("PostgreSQL's %s is absent from %s: %w", b, dir, err)
		}
	}
	return nil
}

// Server is a running PostgreSQL server.
type Server struct {
	dir    string // data (dir/data), socket and log
	cmd    *exec.Cmd
	stdin  *os.File // closing it stops the server
	admin  *sql.DB
	exited chan struct{}
	n      atomic.Int64
}

var (
	mu     sync.Mutex
	shared *Server
	absent error
)

// Shared returns the test binary's server, starting it on first use. It returns an error
// wrapping [ErrAbsent] when PostgreSQL is not installed.
func Shared() (*Server, error) {
	mu.Lock()
	defer mu.Unlock()
	if shared != nil {
		return shared, nil
	}
	if absent != nil {
		return nil, absent
	}
	bin, err := BinDir()
	if err != nil {
		absent = fmt.Errorf("%w: %w", ErrAbsent, err)
		return nil, absent
	}
	s, err := start(bin)
	if err != nil {
		return nil, err
	}
	shared = s
	return s, nil
}

// ErrAbsent is why tests on PostgreSQL skip: its binaries are not installed.
var ErrAbsent = errors.New("PostgreSQL is not installed")

// Stop stops the shared server, if one was started, and removes its directory. Call it
// from TestMain after m.Run; if it is never called, the server stops by itself when the
// test binary exits.
func Stop() {
	mu.Lock()
	defer mu.Unlock()
	if shared == nil {
		return
	}
	shared.stop()
	shared = nil
}

// URL returns a fresh database's URL on the shared server, dropped when t ends. It skips
// t, saying so, only when PostgreSQL is not installed; any other failure fails it.
func URL(t testing.TB) string {
	t.Helper()
	s, err := Shared()
	if errors.Is(err, ErrAbsent) {
		t.Skipf("skipping the PostgreSQL backend: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s.Database(t)
}

// Database creates a fresh, empty database, dropped when t ends, and returns its URL.
func (s *Server) Database(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), s.n.Add(1))
	ctx := context.Background()
	if _, err := s.admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v (server log: %s)", name, err, s.logTail())
	}
	t.Cleanup(func() {
		if _, err := s.admin.ExecContext(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	return s.url(name)
}

// NewDatabase creates a fresh, empty database for a caller that is no test (the
// benchmarks), and returns its URL and what drops it.
func (s *Server) NewDatabase(ctx context.Context) (string, func(), error) {
	name := fmt.Sprintf("b%d_%d", os.Getpid(), s.n.Add(1))
	if _, err := s.admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w (server log: %s)", name, err, s.logTail())
	}
	drop := func() { _, _ = s.admin.ExecContext(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)") }
	return s.url(name), drop, nil
}

// Dir is the server's directory: its socket is there.
func (s *Server) Dir() string { return s.dir }

func (s *Server) url(db string) string {
	q := url.Values{"host": {s.dir}, "sslmode": {"disable"}}
	return "postgres://postgres@/" + db + "?" + q.Encode()
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// watcher runs as the test binary's child, in a process group of its own (a ^C to the
// tests reaches it only through its standard input): it starts the server and, once its
// standard input closes, stops it (SIGINT: fast shutdown). When the server has exited it
// removes the directory; if the server exited by itself, it first keeps the log's end
// beside it (dir.log), for start to report.
const watcher = `
dir=$1; bin=$2; shift 2
exec 3<&0
"$@" "$bin/postgres" -D "$dir/data" -k "$dir" -c listen_addresses= -c fsync=off -c synchronous_commit=off \
	-c full_page_writes=off -c shared_buffers=16MB -c max_connections=300 \
	>"$dir/log" 2>&1 &
pid=$!
(cat <&3 >/dev/null; : >"$dir/stopping"; kill -INT "$pid" 2>/dev/null) &
wait "$pid"
[ -e "$dir/stopping" ] || tail -c 2000 "$dir/log" >"$dir.log" 2>/dev/null
rm -rf "$dir"
`

func start(bin string) (*Server, error) {
	dir, err := os.MkdirTemp("", "paddock-pg-")
	if err != nil {
		return nil, err
	}
	var asUser []string // a command prefix that runs the rest as the server's user
	if os.Geteuid() == 0 {
		name := os.Getenv("PADDOCK_PG_USER")
		if name == "" {
			name = "postgres"
		}
		u, err := user.Lookup(name)
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("PostgreSQL refuses to run as root and there is no user %q to run it as (Debian's package makes one; or set PADDOCK_PG_USER): %w", name, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		asUser = []string{"setpriv", "--reuid=" + u.Uid, "--regid=" + u.Gid, "--init-groups", "--"}
	}
	initdb := append(append([]string{}, asUser...), filepath.Join(bin, "initdb"), "-D", filepath.Join(dir, "data"),
		"-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	if out, err := exec.Command(initdb[0], initdb[1:]...).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	r, w, err := os.Pipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command("/bin/sh", append([]string{"-c", watcher, "pgtest", dir, bin}, asUser...)...)
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	r.Close()
	s := &Server{dir: dir, cmd: cmd, stdin: w, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.exited) }()
	if s.admin, err = sql.Open("pgx", s.url("postgres")); err != nil {
		s.stop()
		return nil, err
	}
	// Wait for the server to answer, as long as it runs: initdb and the first start take
	// seconds on a busy machine, and the deadline only catches a hang.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = s.admin.PingContext(ctx)
		cancel()
		if err == nil {
			return s, nil
		}
		select {
		case <-s.exited:
			b, _ := os.ReadFile(s.dir + ".log")
			s.stop()
			return nil, fmt.Errorf("postgres exited at start: %s", b)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			log := s.logTail()
			s.stop()
			return nil, fmt.Errorf("postgres did not answer on %s: %w: %s", s.dir, err, log)
		}
	}
}

func (s *Server) stop() {
	if s.admin != nil {
		s.admin.Close()
	}
	s.stdin.Close()
	<-s.exited
	os.Remove(s.dir + ".log")
}

// Own is a PostgreSQL server of one test's own, which the test may stop and start again
// (a restart under load) without touching the shared server other tests use.
type Own struct {
	dir    string
	bin    string
	asUser []string
	db     string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	watcher *exec.Cmd
	stdin   *os.File // closing it has the watcher stop the server and remove dir
}

// ownWatcher outlives a killed test binary: once its standard input closes it stops the
// server (by the pid in its pid file, whichever start it was) and removes the directory.
const ownWatcher = `
dir=$1
cat >/dev/null
pid=$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null)
if [ -n "$pid" ]; then
	kill -INT "$pid" 2>/dev/null
	while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
fi
rm -rf "$dir"
`

// StartOwn starts a server of t's own with one database, "paddock"; it skips t, saying
// so, only when PostgreSQL is not installed. The server is stopped and removed when t
// ends, or when the test binary is gone.
func StartOwn(t testing.TB) *Own {
	t.Helper()
	bin, err := BinDir()
	if err != nil {
		t.Skipf("skipping the PostgreSQL backend: %v", err)
	}
	dir, err := os.MkdirTemp("", "paddock-pg-own-")
	if err != nil {
		t.Fatal(err)
	}
	o := &Own{dir: dir, bin: bin, db: "paddock"}
	if os.Geteuid() == 0 {
		name := os.Getenv("PADDOCK_PG_USER")
		if name == "" {
			name = "postgres"
		}
		u, err := user.Lookup(name)
		if err != nil {
			os.RemoveAll(dir)
			t.Fatalf("PostgreSQL refuses to run as root and there is no user %q to run it as: %v", name, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			t.Fatal(err)
		}
		o.asUser = []string{"setpriv", "--reuid=" + u.Uid, "--regid=" + u.Gid, "--init-groups", "--"}
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	o.watcher = exec.Command("/bin/sh", "-c", ownWatcher, "pgtest", dir)
	o.watcher.Stdin = r
	o.watcher.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := o.watcher.Start(); err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	r.Close()
	o.stdin = w
	t.Cleanup(o.close)
	initdb := append(append([]string{}, o.asUser...), filepath.Join(bin, "initdb"), "-D", filepath.Join(dir, "data"),
		"-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	if out, err := exec.Command(initdb[0], initdb[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v: %s", err, out)
	}
	if err := o.Start(); err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("pgx", o.url("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec("CREATE DATABASE " + o.db); err != nil {
		t.Fatalf("create database: %v", err)
	}
	return o
}

// URL is the database's URL.
func (o *Own) URL() string { return o.url(o.db) }

func (o *Own) url(db string) string {
	q := url.Values{"host": {o.dir}, "sslmode": {"disable"}}
	return "postgres://postgres@/" + db + "?" + q.Encode()
}

// Start starts the server (again) and waits until it answers.
func (o *Own) Start() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cmd != nil {
		return errors.New("pgtest: the server is running")
	}
	argv := append(append([]string{}, o.asUser...), filepath.Join(o.bin, "postgres"), "-D", filepath.Join(o.dir, "data"),
		"-k", o.dir, "-c", "listen_addresses=", "-c", "fsync=off", "-c", "shared_buffers=16MB", "-c", "max_connections=100")
	cmd := exec.Command(argv[0], argv[1:]...)
	logf, err := os.OpenFile(filepath.Join(o.dir, "log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	o.cmd, o.exited = cmd, exited
	db, err := sql.Open("pgx", o.url("postgres"))
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = db.PingContext(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			o.cmd = nil
			b, _ := os.ReadFile(filepath.Join(o.dir, "log"))
			return fmt.Errorf("postgres exited at start: %s", b)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not answer on %s: %w", o.dir, err)
		}
	}
}

// Stop stops the server as pg_ctl stop does in mode "fast" (SIGINT: connections are
// ended, the server shuts down cleanly) or "immediate" (SIGQUIT: it quits at once and
// recovers from its log at the next start), and waits until it has exited.
func (o *Own) Stop(mode string) error {
	sig := map[string]syscall.Signal{"smart": syscall.SIGTERM, "fast": syscall.SIGINT, "immediate": syscall.SIGQUIT}[mode]
	if sig == 0 {
		return fmt.Errorf("pgtest: stop mode %q: want smart, fast or immediate", mode)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cmd == nil {
		return errors.New("pgtest: the server is not running")
	}
	if err := o.cmd.Process.Signal(sig); err != nil {
		return err
	}
	<-o.exited
	o.cmd = nil
	return nil
}

func (o *Own) close() {
	o.mu.Lock()
	if o.cmd != nil {
		_ = o.cmd.Process.Signal(syscall.SIGINT)
		<-o.exited
		o.cmd = nil
	}
	// A server stopped "immediate" leaves its pid file: the watcher must not signal
	// whatever process has that pid now.
	os.Remove(filepath.Join(o.dir, "data", "postmaster.pid"))
	o.mu.Unlock()
	o.stdin.Close()
	_ = o.watcher.Wait()
}
