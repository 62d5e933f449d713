package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paddockhq/paddock/internal/capability"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// testSubject is the subject of the sandbox startAgentWith serves.
const testSubject = "sandbox:sb-test"

// capAgent is an agent that holds the keyring derived for its sandbox from keys, the
// control plane's, which mints the tokens a test sends.
type capAgent struct {
	conn  *grpc.ClientConn
	ws    string // the workspace's host path
	keys  *capability.Keyring
	files pb.FilesClient
	proc  pb.ProcessClient
}

func newCapAgent(t *testing.T) *capAgent {
	t.Helper()
	keys := controlPlaneKeys(t)
	agentKeys, err := keys.ForAgent(testSubject)
	if err != nil {
		t.Fatal(err)
	}
	conn, _ := startAgentWith(t, wire.TierContainer, nil, func(env *wire.Envelope) { env.CapabilityKeys = string(agentKeys.Export()) })
	return &capAgent{conn: conn, ws: workspaceOf(t, conn), keys: keys, files: pb.NewFilesClient(conn), proc: pb.NewProcessClient(conn)}
}

func controlPlaneKeys(t *testing.T) *capability.Keyring {
	t.Helper()
	keys, err := capability.NewKeyring(1, map[uint32]capability.RootKey{1: capability.NewRootKey()})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// mint mints an Agent token of the test sandbox, valid for an hour unless c says.
func (a *capAgent) mint(t *testing.T, c capability.Claims) string {
	t.Helper()
	if c.Audience == 0 {
		c.Audience = capability.Agent
	}
	if c.Subject == "" {
		c.Subject = testSubject
	}
	if c.Constraints.Expiry.IsZero() {
		c.Constraints.Expiry = time.Now().Add(time.Hour)
	}
	tok, err := capability.NewMinter(a.keys).Mint(c)
	if err != nil {
		t.Fatal(err)
	}
	return tok.Encoded()
}

// grant mints a token for resource and actions.
func (a *capAgent) grant(t *testing.T, resource string, actions ...capability.Action) string {
	t.Helper()
	return a.mint(t, capability.Claims{Resource: resource, Actions: actions})
}

// plant creates files (a trailing / makes a directory) in the workspace, from the host.
func (a *capAgent) plant(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		host := filepath.Join(a.ws, p)
		if strings.HasSuffix(p, "/") {
			mustDo(t, os.MkdirAll(host, 0o755))
			continue
		}
		mustDo(t, os.MkdirAll(filepath.Dir(host), 0o755))
		mustDo(t, os.WriteFile(host, []byte("content of "+p), 0o644))
	}
}

// link makes a symlink at p in the workspace to target, a path relative to p's
// directory that stays inside the workspace.
func (a *capAgent) link(t *testing.T, p, target string) {
	t.Helper()
	mustDo(t, os.Symlink(target, filepath.Join(a.ws, p)))
}

func (a *capAgent) exists(p string) bool {
	_, err := os.Lstat(filepath.Join(a.ws, p))
	return err == nil
}

func (a *capAgent) hostRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(a.ws, p))
	mustDo(t, err)
	return string(b)
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// write streams data to p under token, in messages of 64 bytes.
func (a *capAgent) write(t *testing.T, token, p string, data []byte, makeParents bool) error {
	t.Helper()
	s, err := a.files.Write(ctx(t))
	mustDo(t, err)
	msg := &pb.WriteRequest{Path: p, Capability: token, MakeParents: makeParents}
	for {
		n := min(len(data), 64)
		msg.Data, data = data[:n], data[n:]
		if err := s.Send(msg); err != nil || len(data) == 0 {
			break // on an error the agent has answered early: CloseAndRecv has the answer
		}
		msg = &pb.WriteRequest{}
	}
	_, err = s.CloseAndRecv()
	return err
}

// read reads p whole under token.
func (a *capAgent) read(t *testing.T, token, p string) (string, error) {
	t.Helper()
	s, err := a.files.Read(ctx(t), &pb.ReadRequest{Path: p, Capability: token})
	mustDo(t, err)
	var out []byte
	for {
		c, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return string(out), nil
		}
		if err != nil {
			return string(out), err
		}
		out = append(out, c.Data...)
	}
}

// wantRefused fails unless err is a PermissionDenied naming the token's refusal and
// holding every one of parts.
func wantRefused(t *testing.T, err error, parts ...string) {
	t.Helper()
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("err = %v, want PermissionDenied", err)
	}
	for _, p := range parts {
		if !strings.Contains(msg, p) {
			t.Fatalf("message %q does not say %q", msg, p)
		}
	}
}

func wantOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("refused: %v", err)
	}
}

func TestCapabilityWrite(t *testing.T) {
	a := newCapAgent(t)
	a.plant(t, "src/", "other/", "src/old.ts")
	tok := a.mint(t, capability.Claims{Resource: "file:/workspace/src", Actions: []capability.Action{capability.Write},
		Constraints: capability.Constraints{MaxSize: 100, AllowedExtensions: []string{".ts"}}})

	t.Run("inside the grant", func(t *testing.T) {
		wantOK(t, a.write(t, tok, "/workspace/src/a.ts", []byte("export {}"), false))
		if got := a.hostRead(t, "src/a.ts"); got != "export {}" {
			t.Fatalf("src/a.ts = %q", got)
		}
	})
	t.Run("with parents inside the grant", func(t *testing.T) {
		wantOK(t, a.write(t, tok, "src/x/y/b.ts", []byte("b"), true))
	})
	t.Run("outside the grant", func(t *testing.T) {
		err := a.write(t, tok, "other/a.ts", []byte("x"), false)
		wantRefused(t, err, `write "other/a.ts"`, "resource file:/workspace/other/a.ts outside file:/workspace/src", "capability ")
		if a.exists("other/a.ts") {
			t.Fatal("other/a.ts was written")
		}
	})
	t.Run("outside the grant with parents makes no directory", func(t *testing.T) {
		wantRefused(t, a.write(t, tok, "other/p/q/a.ts", []byte("x"), true), "outside file:/workspace/src")
		if a.exists("other/p") {
			t.Fatal("other/p was made")
		}
	})
	t.Run("extension not allowed", func(t *testing.T) {
		wantRefused(t, a.write(t, tok, "src/a.js", []byte("x"), false), "extension .js not allowed (allowed: .ts)")
		if a.exists("src/a.js") {
			t.Fatal("src/a.js was written")
		}
	})
	t.Run("over max_size", func(t *testing.T) {
		wantRefused(t, a.write(t, tok, "src/old.ts", []byte(strings.Repeat("x", 101)), false), "size 101 over max 100")
		if got := a.hostRead(t, "src/old.ts"); got != "content of src/old.ts" {
			t.Fatalf("the old file changed: %q", got)
		}
		wantNoTempFiles(t, filepath.Join(a.ws, "src"))
	})
	t.Run("over max_size, refused before the stream ends", func(t *testing.T) {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := a.files.Write(c)
		mustDo(t, err)
		mustDo(t, s.Send(&pb.WriteRequest{Path: "src/stream.ts", Data: []byte(strings.Repeat("x", 150)), Capability: tok}))
		// The stream stays open: the answer comes as soon as the data passes max_size.
		wantRefused(t, s.RecvMsg(&pb.FileInfo{}), "size 150 over max 100")
		if a.exists("src/stream.ts") {
			t.Fatal("src/stream.ts was written")
		}
	})
	t.Run("at max_size", func(t *testing.T) {
		wantOK(t, a.write(t, tok, "src/full.ts", []byte(strings.Repeat("x", 100)), false))
	})
}

func wantNoTempFiles(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	mustDo(t, err)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".paddock-write-") {
			t.Fatalf("temp file %s left in %s", e.Name(), dir)
		}
	}
}

// TestCapabilityWriteVerifiedAgainAtCommit: the directory a write goes into is verified
// again just before the file is renamed into place; moved out of the grant meanwhile,
// the write is refused there and nothing lands.
func TestCapabilityWriteVerifiedAgainAtCommit(t *testing.T) {
	a := newCapAgent(t)
	a.plant(t, "src/sub/", "other/")
	tok := a.grant(t, "file:/workspace/src", capability.Write)
	s, err := a.files.Write(ctx(t))
	mustDo(t, err)
	mustDo(t, s.Send(&pb.WriteRequest{Path: "src/sub/a.ts", Data: []byte("first"), Capability: tok}))
	// The first check has passed once the temp file is there.
	sub := filepath.Join(a.ws, "src", "sub")
	for deadline := time.Now().Add(10 * time.Second); ; {
		if ents, _ := os.ReadDir(sub); len(ents) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the write never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	mustDo(t, os.Rename(sub, filepath.Join(a.ws, "other", "sub")))
	mustDo(t, s.Send(&pb.WriteRequest{Data: []byte(" second")}))
	_, err = s.CloseAndRecv()
	wantRefused(t, err, "resource file:/workspace/other/sub/a.ts outside file:/workspace/src")
	if a.exists("other/sub/a.ts") {
		t.Fatal("the file landed outside the grant")
	}
	wantNoTempFiles(t, filepath.Join(a.ws, "other", "sub"))
}

// TestCapabilitySymlinks: a symlink inside the workspace from a granted directory to one
// not granted gains nothing: the token is verified on where the path leads.
func TestCapabilitySymlinks(t *testing.T) {
	a := newCapAgent(t)
	a.plant(t, "granted/own.txt", "secret/key.txt")
	a.link(t, "granted/keylink.txt", "../secret/key.txt")
	a.link(t, "granted/dirlink", "../secret")
	tok := a.grant(t, "file:/workspace/granted", capability.Read, capability.Write, capability.Delete)

	got, err := a.read(t, tok, "granted/own.txt")
	if err != nil || got != "content of granted/own.txt" {
		t.Fatalf("read granted/own.txt: %q %v", got, err)
	}
	_, err = a.read(t, tok, "granted/keylink.txt")
	wantRefused(t, err, "resource file:/workspace/secret/key.txt outside file:/workspace/granted")
	_, err = a.read(t, tok, "/workspace/granted/dirlink/key.txt")
	wantRefused(t, err, "resource file:/workspace/secret/key.txt outside")

	wantRefused(t, a.write(t, tok, "granted/dirlink/planted.txt", []byte("x"), false), "resource file:/workspace/secret/planted.txt outside")
	if a.exists("secret/planted.txt") {
		t.Fatal("written through the symlink")
	}
	wantRefused(t, a.write(t, tok, "granted/dirlink/new/planted.txt", []byte("x"), true), "resource file:/workspace/secret/new/planted.txt outside")
	if a.exists("secret/new") {
		t.Fatal("a directory was made through the symlink")
	}

	_, err = a.files.List(ctx(t), &pb.ListFilesRequest{Path: "granted/dirlink", Capability: tok})
	wantRefused(t, err, "resource file:/workspace/secret outside")
	_, err = a.files.Mkdir(ctx(t), &pb.MkdirRequest{Path: "granted/dirlink/d", Capability: tok})
	wantRefused(t, err, "resource file:/workspace/secret/d outside")
	_, err = a.files.Remove(ctx(t), &pb.RemoveRequest{Path: "granted/dirlink/key.txt", Capability: tok})
	wantRefused(t, err, "resource file:/workspace/secret/key.txt outside")
	if !a.exists("secret/key.txt") || a.exists("secret/d") {
		t.Fatal("something was done through the symlink")
	}
	// The symlink itself is in the grant: removing it is not removing its target.
	_, err = a.files.Remove(ctx(t), &pb.RemoveRequest{Path: "granted/keylink.txt", Capability: tok})
	wantOK(t, err)
	if a.exists("granted/keylink.txt") || !a.exists("secret/key.txt") {
		t.Fatal("removed the wrong thing")
	}
}

// TestCapabilityFileActions: each operation asks the token for its own action: list
// read, mkdir write, remove delete, move delete on the source and write on the target.
func TestCapabilityFileActions(t *testing.T) {
	const (
		r = capability.Read
		w = capability.Write
		d = capability.Delete
	)
	tests := []struct {
		name    string
		actions []capability.Action
		call    func(a *capAgent, tok string) error
		refused string // "" for allowed
		check   func(a *capAgent) bool
	}{
		{"list with read", []capability.Action{r}, func(a *capAgent, tok string) error {
			_, err := a.files.List(context.Background(), &pb.ListFilesRequest{Path: "d", Capability: tok})
			return err
		}, "", nil},
		{"list without read", []capability.Action{w, d}, func(a *capAgent, tok string) error {
			_, err := a.files.List(context.Background(), &pb.ListFilesRequest{Path: "d", Capability: tok})
			return err
		}, "action read not allowed", nil},
		{"mkdir with write", []capability.Action{w}, func(a *capAgent, tok string) error {
			_, err := a.files.Mkdir(context.Background(), &pb.MkdirRequest{Path: "d/n", Capability: tok})
			return err
		}, "", func(a *capAgent) bool { return a.exists("d/n") }},
		{"mkdir without write", []capability.Action{r, d}, func(a *capAgent, tok string) error {
			_, err := a.files.Mkdir(context.Background(), &pb.MkdirRequest{Path: "d/n", Capability: tok})
			return err
		}, "action write not allowed", func(a *capAgent) bool { return !a.exists("d/n") }},
		{"mkdir -p outside", []capability.Action{w}, func(a *capAgent, tok string) error {
			_, err := a.files.Mkdir(context.Background(), &pb.MkdirRequest{Path: "e/x/y", Parents: true, Capability: tok})
			return err
		}, "resource file:/workspace/e/x/y outside file:/workspace/d", func(a *capAgent) bool { return !a.exists("e/x") }},
		{"mkdir -p inside", []capability.Action{w}, func(a *capAgent, tok string) error {
			_, err := a.files.Mkdir(context.Background(), &pb.MkdirRequest{Path: "d/x/y", Parents: true, Capability: tok})
			return err
		}, "", func(a *capAgent) bool { return a.exists("d/x/y") }},
		{"remove with delete", []capability.Action{d}, func(a *capAgent, tok string) error {
			_, err := a.files.Remove(context.Background(), &pb.RemoveRequest{Path: "d/f", Capability: tok})
			return err
		}, "", func(a *capAgent) bool { return !a.exists("d/f") }},
		{"remove without delete", []capability.Action{r, w}, func(a *capAgent, tok string) error {
			_, err := a.files.Remove(context.Background(), &pb.RemoveRequest{Path: "d/f", Capability: tok})
			return err
		}, "action delete not allowed", func(a *capAgent) bool { return a.exists("d/f") }},
		{"remove outside", []capability.Action{d}, func(a *capAgent, tok string) error {
			_, err := a.files.Remove(context.Background(), &pb.RemoveRequest{Path: "e/f", Capability: tok})
			return err
		}, "outside file:/workspace/d", func(a *capAgent) bool { return a.exists("e/f") }},
		{"move with delete and write", []capability.Action{d, w}, func(a *capAgent, tok string) error {
			_, err := a.files.Move(context.Background(), &pb.MoveRequest{From: "d/f", To: "d/g", Capability: tok})
			return err
		}, "", func(a *capAgent) bool { return !a.exists("d/f") && a.exists("d/g") }},
		{"move without delete", []capability.Action{r, w}, func(a *capAgent, tok string) error {
			_, err := a.files.Move(context.Background(), &pb.MoveRequest{From: "d/f", To: "d/g", Capability: tok})
			return err
		}, "action delete not allowed", func(a *capAgent) bool { return a.exists("d/f") && !a.exists("d/g") }},
		{"move without write", []capability.Action{r, d}, func(a *capAgent, tok string) error {
			_, err := a.files.Move(context.Background(), &pb.MoveRequest{From: "d/f", To: "d/g", Capability: tok})
			return err
		}, "action write not allowed", func(a *capAgent) bool { return a.exists("d/f") && !a.exists("d/g") }},
		{"move out of the grant", []capability.Action{d, w}, func(a *capAgent, tok string) error {
			_, err := a.files.Move(context.Background(), &pb.MoveRequest{From: "d/f", To: "e/g", Capability: tok})
			return err
		}, "resource file:/workspace/e/g outside file:/workspace/d", func(a *capAgent) bool { return a.exists("d/f") && !a.exists("e/g") }},
		{"move into the grant", []capability.Action{d, w}, func(a *capAgent, tok string) error {
			_, err := a.files.Move(context.Background(), &pb.MoveRequest{From: "e/f", To: "d/g", Capability: tok})
			return err
		}, "resource file:/workspace/e/f outside file:/workspace/d", func(a *capAgent) bool { return a.exists("e/f") && !a.exists("d/g") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newCapAgent(t)
			a.plant(t, "d/f", "e/f")
			err := tt.call(a, a.grant(t, "file:/workspace/d", tt.actions...))
			if tt.refused == "" {
				wantOK(t, err)
			} else {
				wantRefused(t, err, tt.refused)
			}
			if tt.check != nil && !tt.check(a) {
				t.Fatal("the workspace is not as it should be afterwards")
			}
		})
	}
}

// TestCapabilityRead: the size verified is what is sent, so max_size bounds a read, and
// a range of a large file fits where the whole does not.
func TestCapabilityRead(t *testing.T) {
	a := newCapAgent(t)
	a.plant(t, "r/")
	mustDo(t, os.WriteFile(filepath.Join(a.ws, "r", "big"), []byte(strings.Repeat("x", 1000)), 0o644))
	tok := a.mint(t, capability.Claims{Resource: "file:/workspace/r", Actions: []capability.Action{capability.Read},
		Constraints: capability.Constraints{MaxSize: 500}})
	_, err := a.read(t, tok, "r/big")
	wantRefused(t, err, "size 1000 over max 500")
	s, err := a.files.Read(ctx(t), &pb.ReadRequest{Path: "r/big", Offset: 600, Capability: tok})
	mustDo(t, err)
	c, err := s.Recv()
	if err != nil || len(c.Data) != 400 {
		t.Fatalf("read of the last 400 bytes: %d bytes, %v", len(c.GetData()), err)
	}
}

func TestCapabilityExec(t *testing.T) {
	a := newCapAgent(t)
	echo := a.grant(t, "exec:echo", capability.Exec)
	sh := a.grant(t, "exec:sh", capability.Exec)
	run := func(tok string, argv ...string) (*pb.ExecuteResponse, error) {
		return a.proc.Execute(ctx(t), &pb.ExecuteRequest{Argv: argv, Capability: tok})
	}

	resp, err := run(echo, "echo", "hi")
	if err != nil || string(resp.Stdout) != "hi\n" {
		t.Fatalf("echo under exec:echo: %v %v", resp, err)
	}
	_, err = run(echo, "cat", "/etc/hostname")
	wantRefused(t, err, "exec cat: capability ", "resource exec:cat outside exec:echo")

	// A shell's builtins need no grant; every program in its script does.
	resp, err = run(sh, "sh", "-c", "cd / && echo ok")
	if err != nil || string(resp.Stdout) != "ok\n" {
		t.Fatalf("sh -c with builtins under exec:sh: %v %v", resp, err)
	}
	_, err = run(sh, "sh", "-c", "echo ran > marker; curl x")
	wantRefused(t, err, "exec curl: ", "resource exec:curl outside exec:sh")
	_, err = run(sh, "sh", "-c", "echo ran > marker; ls")
	wantRefused(t, err, "resource exec:ls outside exec:sh")
	if a.exists("marker") {
		t.Fatal("the shell ran")
	}
	_, err = run(sh, "sh", "-c", `"$X" y`)
	wantRefused(t, err, "cannot tell what runs: the program name is not literal")
	_, err = a.proc.Execute(ctx(t), &pb.ExecuteRequest{Argv: []string{"sh", "-c", "echo x"}, Capability: sh,
		Env: []string{"PATH=/bin:/usr/bin", "BASH_FUNC_echo%%=() { curl x; }"}})
	wantRefused(t, err, "env[0]: PATH is refused", "rule env.shell")

	// Start asks the same.
	s, err := a.proc.Start(ctx(t), &pb.StartRequest{Argv: []string{"cat"}, Capability: echo})
	mustDo(t, err)
	_, err = s.Recv()
	wantRefused(t, err, "resource exec:cat outside exec:echo")
	s, err = a.proc.Start(ctx(t), &pb.StartRequest{Argv: []string{"echo", "started"}, Capability: echo})
	mustDo(t, err)
	if out, exit := events(t, s); out != "started\n" || exit.GetExitCode() != 0 {
		t.Fatalf("Start under exec:echo: %q %v", out, exit)
	}
}

// TestCapabilityTokens: what the agent takes as a token at all.
func TestCapabilityTokens(t *testing.T) {
	a := newCapAgent(t)
	a.plant(t, "src/ui/a.ts", "src/b.ts")
	readOf := func(tok string) error { _, err := a.read(t, tok, "src/ui/a.ts"); return err }

	t.Run("another sandbox's", func(t *testing.T) {
		tok := a.mint(t, capability.Claims{Subject: "sandbox:sb-other", Resource: "file:/workspace", Actions: []capability.Action{capability.Read}})
		wantRefused(t, readOf(tok), "the token is for sandbox:sb-other; this agent holds only the key of sandbox:sb-test")
	})
	t.Run("the control plane's", func(t *testing.T) {
		tok := a.mint(t, capability.Claims{Audience: capability.ControlPlane, Resource: "file:/workspace", Actions: []capability.Action{capability.Read}})
		wantRefused(t, readOf(tok), "the token is for the control plane, not the agent")
	})
	t.Run("expired", func(t *testing.T) {
		tok := a.mint(t, capability.Claims{Resource: "file:/workspace", Actions: []capability.Action{capability.Read},
			Constraints: capability.Constraints{NotBefore: time.Now().Add(-2 * time.Hour), Expiry: time.Now().Add(-time.Hour)}})
		wantRefused(t, readOf(tok), "expired at")
	})
	t.Run("tampered", func(t *testing.T) {
		tok := a.grant(t, "file:/workspace", capability.Read)
		err := readOf(tok[:len(tok)-2] + "AA")
		if code := status.Code(err); code != codes.PermissionDenied && code != codes.InvalidArgument {
			t.Fatalf("a tampered token: %v", err)
		}
	})
	t.Run("attenuated", func(t *testing.T) {
		tok := a.grant(t, "file:/workspace/src", capability.Read, capability.Write)
		narrow, err := capability.Attenuate(tok, capability.Caveat{Resource: "file:/workspace/src/ui", Actions: []capability.Action{capability.Read}})
		mustDo(t, err)
		wantOK(t, readOf(tok))
		wantOK(t, readOf(narrow))
		_, err = a.read(t, narrow, "src/b.ts")
		wantRefused(t, err, "caveat 1: resource file:/workspace/src/b.ts outside file:/workspace/src/ui")
		wantOK(t, a.write(t, tok, "src/ui/a.ts", []byte("w"), false))
		wantRefused(t, a.write(t, narrow, "src/ui/a.ts", []byte("w"), false), "caveat 1: action write not allowed")
	})
	t.Run("none: the control plane decided", func(t *testing.T) {
		wantOK(t, readOf(""))
	})
}

// TestCapabilityWithoutKeyring: an agent started without a keyring refuses every request
// that carries a token, and serves the others.
func TestCapabilityWithoutKeyring(t *testing.T) {
	conn, _ := startAgent(t, nil)
	ws := workspaceOf(t, conn)
	mustDo(t, os.WriteFile(filepath.Join(ws, "f"), []byte("x"), 0o644))
	a := &capAgent{conn: conn, ws: ws, keys: controlPlaneKeys(t), files: pb.NewFilesClient(conn), proc: pb.NewProcessClient(conn)}
	tok := a.grant(t, "file:/workspace", capability.Read)
	want := "holds no capability keyring"
	_, err := a.read(t, tok, "f")
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), want) {
		t.Fatalf("read with a token: %v", err)
	}
	_, err = a.proc.Execute(ctx(t), &pb.ExecuteRequest{Argv: []string{"true"}, Capability: a.grant(t, "exec:true", capability.Exec)})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), want) {
		t.Fatalf("exec with a token: %v", err)
	}
	if _, err := a.read(t, "", "f"); err != nil {
		t.Fatalf("read without a token: %v", err)
	}
}

// TestCapabilityKeysMustBeThisSandboxs: an agent handed a keyring that is not its own
// sandbox's does not start.
func TestCapabilityKeysMustBeThisSandboxs(t *testing.T) {
	keys := controlPlaneKeys(t)
	other, err := keys.ForAgent("sandbox:sb-other")
	mustDo(t, err)
	for _, tc := range []struct {
		name, keys, want string
	}{
		{"another sandbox's", string(other.Export()), "capability keys: the keyring is for sandbox:sb-other, not sandbox:sb-test"},
		{"the control plane's", string(keys.Export()), "the envelope holds the control plane's root keys"},
		{"malformed", "not a keyring", "capability keys: capability keyring: line 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			lis, err := net.Listen("unix", filepath.Join(dir, "agent.sock"))
			mustDo(t, err)
			defer lis.Close()
			env := &wire.Envelope{Version: wire.EnvelopeVersion, SandboxID: "sb-test", Tier: wire.TierContainer, Workspace: dir,
				ListenFD: 3, Env: []string{"PATH=/bin"}, Main: &wire.Command{Argv: []string{"touch", "main-ran"}}, CapabilityKeys: tc.keys}
			c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = Run(c, env, lis, func(*wire.Envelope) error { return nil }, slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v, want an error saying %q", err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(dir, "main-ran")); err == nil {
				t.Fatal("the main command ran")
			}
		})
	}
}

// TestCapabilityAsTheSandboxUser: in the container tier file operations run with the
// sandbox user's identity, in a process that is not dumpable; finding where an open file
// is (/proc/self/fd) works there too.
func TestCapabilityAsTheSandboxUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("acting as the sandbox user needs root (CI runs as root)")
	}
	keys := controlPlaneKeys(t)
	agentKeys, err := keys.ForAgent(testSubject)
	mustDo(t, err)
	conn, _ := startAgentWith(t, wire.TierContainer, nil, func(env *wire.Envelope) {
		env.CapabilityKeys = string(agentKeys.Export())
		env.RunAs = &wire.User{UID: 65534, GID: 65534}
		mustDo(t, os.Chown(env.Workspace, 65534, 65534)) // a directory the test just made
	})
	a := &capAgent{conn: conn, ws: workspaceOf(t, conn), keys: keys, files: pb.NewFilesClient(conn), proc: pb.NewProcessClient(conn)}
	tok := a.grant(t, "file:/workspace/src", capability.Write, capability.Read)
	wantOK(t, a.write(t, tok, "src/a.ts", []byte("a"), true))
	wantRefused(t, a.write(t, tok, "other/a.ts", []byte("a"), true), "resource file:/workspace/other/a.ts outside file:/workspace/src")
	if got, err := a.read(t, tok, "src/a.ts"); err != nil || got != "a" {
		t.Fatalf("read back: %q %v", got, err)
	}
	fi, err := os.Stat(filepath.Join(a.ws, "src", "a.ts"))
	mustDo(t, err)
	if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != 65534 {
		t.Fatalf("src/a.ts belongs to uid %d, not the sandbox user", uid)
	}
}
