package sandboxops_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/sandboxops"
	"github.com/paddockhq/paddock/internal/servertest"
)

// opsEnv is a real control plane whose operations a test calls directly, as a front door
// other than HTTP does: alice owns sb, bob owns nothing.
type opsEnv struct {
	env        *servertest.Env
	ops        *sandboxops.Ops
	alice, bob fleet.Caller
	sb         string
	// client is alice's session, to read her audit log as she would.
	client *servertest.Client
}

func startOps(t *testing.T) opsEnv {
	t.Helper()
	env := servertest.Start(t)
	caller := func(c *servertest.Client) fleet.Caller {
		return fleet.Caller{UserID: c.User.ID, Username: c.User.Username}
	}
	alice := env.Register(t, "alice")
	e := opsEnv{env: env, ops: env.Server.Ops(), alice: caller(alice), bob: caller(env.Register(t, "bob")), client: alice}
	rec, err := env.Server.Fleet().Create(t.Context(), e.alice, api.CreateSandboxRequest{Name: "ops"})
	if err != nil {
		t.Fatalf("create a sandbox: %v", err)
	}
	e.sb = rec.ID
	return e
}

// sh runs script in the sandbox as alice and returns its standard output.
func (e opsEnv) sh(t *testing.T, ctx context.Context, script string) string {
	t.Helper()
	res, err := e.ops.Exec(ctx, e.alice, e.sb, api.ExecRequest{Argv: []string{"sh", "-c", script}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("sh -c %q: %+v, %v", script, res, err)
	}
	return string(res.Stdout)
}

// events lists alice's audit events of action recorded so far, through the API.
func (e opsEnv) events(t *testing.T, action string) []api.Event {
	t.Helper()
	var out api.EventList
	servertest.Decode(t, e.client.Do("GET", "/api/v1/events?action="+url.QueryEscape(action), nil), http.StatusOK, &out)
	return out.Events
}

// Every operation works without HTTP, for the sandbox's owner only, with its audit events.
func TestOpsWithoutHTTP(t *testing.T) {
	e := startOps(t)
	ctx := t.Context()

	t.Run("exec", func(t *testing.T) {
		if got := e.sh(t, ctx, "echo hi; echo err >&2"); got != "hi\n" {
			t.Errorf("stdout %q", got)
		}
		if _, err := e.ops.Exec(ctx, e.alice, e.sb, api.ExecRequest{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("no argv: %v, want ErrInvalidArgument", err)
		}
		if _, err := e.ops.Exec(ctx, e.bob, e.sb, api.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("another user's sandbox: %v, want ErrNotFound", err)
		}
		if len(e.events(t, "sandbox.exec")) == 0 {
			t.Error("no sandbox.exec event")
		}
	})

	t.Run("stream", func(t *testing.T) {
		if _, err := e.ops.OpenStream(ctx, e.bob, e.sb); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("another user's sandbox: %v, want ErrNotFound", err)
		}
		gate, err := e.ops.OpenStream(ctx, e.alice, e.sb)
		if err != nil {
			t.Fatal(err)
		}
		sess, exit, err := gate.Start(ctx, api.StreamStart{Argv: []string{"sh", "-c", "read x; echo got $x; exit 3"}})
		if err != nil || exit != nil {
			t.Fatalf("start: %v, %+v", err, exit)
		}
		defer sess.Close()
		if err := sess.Write([]byte("hello\n")); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		for {
			stream, data, exit, err := sess.Recv()
			if err != nil {
				t.Fatalf("recv after %q: %v", out.String(), err)
			}
			if exit != nil {
				if exit.ExitCode != 3 || out.String() != "got hello\n" {
					t.Errorf("exit %+v after %q", exit, out.String())
				}
				break
			}
			if stream == api.StreamStdout {
				out.Write(data)
			}
		}
	})

	t.Run("files", func(t *testing.T) {
		info, err := e.ops.WriteFile(ctx, e.alice, e.sb, sandboxops.WriteRequest{Path: "src/a.txt"}, strings.NewReader("content"))
		if err != nil || info.Size != 7 || info.Path != "src/a.txt" {
			t.Fatalf("write: %+v, %v", info, err)
		}
		d, err := e.ops.ReadFile(ctx, e.alice, e.sb, "src/a.txt")
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if _, err := d.WriteTo(&got); err != nil || got.String() != "content" {
			t.Errorf("read: %q, %v", got.String(), err)
		}
		if _, err := e.ops.ReadFile(ctx, e.alice, e.sb, "src/missing.txt"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("a missing file: %v, want ErrNotFound", err)
		}
		if _, err := e.ops.ReadFile(ctx, e.bob, e.sb, "src/a.txt"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("another user's sandbox: %v, want ErrNotFound", err)
		}
		if _, err := e.ops.Mkdir(ctx, e.alice, e.sb, api.FileMkdirRequest{Path: "d"}); err != nil {
			t.Fatal(err)
		}
		if info, err := e.ops.Move(ctx, e.alice, e.sb, api.FileMoveRequest{From: "src/a.txt", To: "d/b.txt"}); err != nil || info.Path != "d/b.txt" {
			t.Fatalf("move: %+v, %v", info, err)
		}
		list, err := e.ops.ListFiles(ctx, e.alice, e.sb, "d")
		if err != nil || len(list.Entries) != 1 || list.Entries[0].Name != "b.txt" {
			t.Errorf("list d: %+v, %v", list, err)
		}
		if err := e.ops.Remove(ctx, e.alice, e.sb, "d", true); err != nil {
			t.Fatal(err)
		}
		if got := e.sh(t, ctx, "ls /workspace"); strings.Contains(got, "d\n") {
			t.Errorf("after remove: %q", got)
		}
		for _, action := range []string{"sandbox.file_write", "sandbox.file_mkdir", "sandbox.file_move", "sandbox.file_remove"} {
			if len(e.events(t, action)) != 1 {
				t.Errorf("%s events: want 1", action)
			}
		}
	})

	t.Run("history", func(t *testing.T) {
		// An exec that changes the workspace is checkpointed after it: a manual checkpoint
		// then finds nothing new.
		e.sh(t, ctx, "echo one > /workspace/h.txt")
		cp, err := e.ops.Checkpoint(ctx, e.alice, e.sb, api.CheckpointRequest{Message: "one"})
		if err != nil || cp.Created || cp.Checkpoint.ID == "" {
			t.Fatalf("checkpoint: %+v, %v", cp, err)
		}
		e.sh(t, ctx, "echo two > /workspace/h.txt")
		if _, err := e.ops.Undo(ctx, e.alice, e.sb); err != nil {
			t.Fatal(err)
		}
		if got := e.sh(t, ctx, "cat /workspace/h.txt"); got != "one\n" {
			t.Errorf("after undo: %q", got)
		}
		h, err := e.ops.History(ctx, e.alice, e.sb)
		if err != nil || len(h.Checkpoints) < 2 {
			t.Errorf("history: %+v, %v", h, err)
		}
		if _, err := e.ops.History(ctx, e.bob, e.sb); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("another user's sandbox: %v, want ErrNotFound", err)
		}
		if _, err := e.ops.HistoryEvents(ctx, e.alice, e.sb, -1, 0); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("events after -1: %v, want ErrInvalidArgument", err)
		}
		if _, err := e.ops.Restore(ctx, e.alice, e.sb, api.RestoreRequest{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("restore of no checkpoint: %v, want ErrInvalidArgument", err)
		}
		// The agent's own events reach the timeline, as they do with no request at all.
		deadline := time.Now().Add(time.Minute)
		for {
			evs, err := e.ops.HistoryEvents(ctx, e.alice, e.sb, 0, 0)
			if err == nil && len(evs.Events) >= 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("timeline: %+v, %v; want the two checkpoints and the restore", evs, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("app", func(t *testing.T) {
		st, err := e.ops.AppStatus(ctx, e.alice, e.sb)
		if err != nil || st.State == "" {
			t.Errorf("app status: %+v, %v", st, err)
		}
	})
}

// A policy and a capability decide in the layer, whoever calls it.
func TestOpsPolicyAndCapability(t *testing.T) {
	e := startOps(t)
	ctx := t.Context()
	pol := "shell:\n  deny:\n    - \"touch /workspace/pwned\"\n"
	got, err := e.ops.PutPolicy(ctx, e.alice, e.sb, func() ([]byte, error) { return []byte(pol), nil })
	if err != nil || got.Source != api.PolicySandbox {
		t.Fatalf("put policy: %+v, %v", got, err)
	}
	_, err = e.ops.Exec(ctx, e.alice, e.sb, api.ExecRequest{Argv: []string{"touch", "/workspace/pwned"}})
	if !errors.Is(err, errdefs.ErrPermissionDenied) || !strings.Contains(err.Error(), "shell.deny[0]") {
		t.Errorf("a denied command: %v", err)
	}
	if len(e.events(t, "sandbox.exec_denied")) != 1 {
		t.Error("want one sandbox.exec_denied event")
	}
	// A stream's command is decided once it is known; nothing reaches the sandbox.
	gate, err := e.ops.OpenStream(ctx, e.alice, e.sb)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := gate.Start(ctx, api.StreamStart{Argv: []string{"touch", "/workspace/pwned"}}); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("a denied stream: %v, want ErrPermissionDenied", err)
	}
	if len(e.events(t, "sandbox.exec_stream_denied")) != 1 {
		t.Error("want one sandbox.exec_stream_denied event")
	}
	if got := e.sh(t, ctx, "ls /workspace"); strings.Contains(got, "pwned") {
		t.Errorf("a denied command ran: %q", got)
	}
	if err := e.ops.DeletePolicy(ctx, e.alice, e.sb); err != nil {
		t.Fatal(err)
	}
	if got, err := e.ops.GetPolicy(ctx, e.alice, e.sb); err != nil || got.Source != api.PolicyNone {
		t.Errorf("after delete: %+v, %v", got, err)
	}

	tok, err := e.ops.MintCapability(ctx, e.alice, e.sb, api.CapabilityRequest{Resource: "exec:echo", Actions: []string{"exec"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.ops.MintCapability(ctx, e.bob, e.sb, api.CapabilityRequest{Resource: "exec:*", Actions: []string{"exec"}}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("bob mints for alice's sandbox: %v, want ErrNotFound", err)
	}
	held, err := e.ops.AdmitCapability(ctx, tok.Token, e.sb)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := e.ops.Exec(held, e.alice, e.sb, api.ExecRequest{Argv: []string{"echo", "ok"}}); err != nil || string(res.Stdout) != "ok\n" {
		t.Errorf("echo under the token: %+v, %v", res, err)
	}
	if _, err := e.ops.Exec(held, e.alice, e.sb, api.ExecRequest{Argv: []string{"ls"}}); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("ls under a token for echo: %v, want ErrPermissionDenied", err)
	}
	if _, err := e.ops.RevokeCapability(ctx, e.alice, e.sb, tok.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ops.AdmitCapability(ctx, tok.Token, e.sb); err == nil {
		t.Error("a revoked token was admitted")
	}
	list, err := e.ops.ListCapabilities(ctx, e.alice, e.sb)
	if err != nil || len(list.Capabilities) != 1 || list.Capabilities[0].RevokedAt == nil {
		t.Errorf("list: %+v, %v", list, err)
	}
}
