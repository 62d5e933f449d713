package paddock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/servertest"
)

// Every route of /api/v1 is reached by a call of this package against a real server,
// each call does what it says, and the server's own count of requests by route shows
// none is left out.
func TestEveryRoute(t *testing.T) {
	e := servertest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, pw, err := e.Server.FirstAdmin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := paddock.Dial(ctx, e.URL)
	ok(t, err)
	tok, err := admin.Login(ctx, "admin", pw, "sdk test")
	ok(t, err)
	admin = paddock.New(e.URL, paddock.WithToken(tok.Secret))
	c := paddock.New(e.URL, paddock.WithToken(e.Register(t, "alice").Token))

	me, err := c.Me(ctx)
	if ok(t, err); me.Username != "alice" {
		t.Errorf("me: %+v", me)
	}
	if _, err := c.SetAgentChoice(ctx, paddock.AgentChoice{Model: "some-model"}); err != nil {
		t.Error(err)
	}
	agent, err := c.AgentSettings(ctx)
	if ok(t, err); agent.Model != "some-model" || agent.Provider != "" {
		t.Errorf("agent settings: %+v", agent)
	}
	sb, err := c.Sandboxes.Create(ctx, paddock.SandboxSpec{Name: "every", Memory: "256M"})
	ok(t, err)
	if sb.Info.State != paddock.StateRunning || sb.Info.Name != "every" {
		t.Fatalf("created: %+v", sb.Info)
	}
	list, err := c.Sandboxes.List(ctx, false)
	if ok(t, err); len(list) != 1 || list[0].ID != sb.ID {
		t.Errorf("list: %+v", list)
	}
	_, err = admin.Sandboxes.List(ctx, true)
	ok(t, err)
	got, err := c.Sandboxes.Get(ctx, sb.ID)
	if ok(t, err); got.Info.ID != sb.ID {
		t.Errorf("get: %+v", got.Info)
	}

	// Files, one by one and as trees.
	_, err = sb.Mkdir(ctx, "src/pkg", true, 0o750)
	ok(t, err)
	_, err = sb.WriteFile(ctx, "src/pkg/a.txt", strings.NewReader("alpha"), 0o600)
	ok(t, err)
	moved, err := sb.Move(ctx, "src/pkg/a.txt", "src/b.txt", false)
	if ok(t, err); moved.Path != "src/b.txt" {
		t.Errorf("move: %+v", moved)
	}
	files, err := sb.ListFiles(ctx, "src")
	if ok(t, err); len(files) != 2 {
		t.Errorf("list src: %+v", files)
	}
	r, err := sb.ReadFile(ctx, "src/b.txt")
	ok(t, err)
	if b, _ := io.ReadAll(r); string(b) != "alpha" {
		t.Errorf("read: %q", b)
	}
	r.Close()
	ok(t, sb.Remove(ctx, "src/pkg", true))
	dir := t.TempDir()
	ok(t, os.WriteFile(filepath.Join(dir, "c.txt"), []byte("gamma"), 0o644))
	_, err = sb.CopyIn(ctx, dir, "copied")
	ok(t, err)
	res, err := sb.CopyOut(ctx, "copied", filepath.Join(dir, "back"))
	ok(t, err)
	if b, _ := os.ReadFile(filepath.Join(dir, "back", "c.txt")); string(b) != "gamma" || res.Files != 1 {
		t.Errorf("copied out: %q, %+v", b, res)
	}

	// Commands: one-shot, streamed, on a terminal.
	run, err := sb.Exec(ctx, []string{"sh", "-c", "cat; echo $X; pwd"}, paddock.WithStdin([]byte("in\n")), paddock.WithEnv("X=y"), paddock.WithDir("src"), paddock.WithTimeout(time.Minute))
	if ok(t, err); string(run.Stdout) != "in\ny\n/workspace/src\n" {
		t.Errorf("exec: %+v", run)
	}
	pty, err := sb.PTY(ctx, []string{"sh", "-c", "stty size"}, 33, 101)
	ok(t, err)
	var out bytes.Buffer
	exit, err := pty.Copy(ctx, &out, &out)
	if ok(t, err); exit.ExitCode != 0 || !strings.Contains(out.String(), "33 101") {
		t.Errorf("pty: %+v %q", exit, out.String())
	}
	pty.Close()

	// History.
	cp, err := sb.Checkpoint(ctx, "by hand")
	ok(t, err)
	_, err = sb.History(ctx)
	ok(t, err)
	_, err = sb.Diff(ctx, "", cp.Checkpoint.ID)
	ok(t, err)
	_, err = sb.Exec(ctx, []string{"touch", "new"})
	ok(t, err)
	_, err = sb.Undo(ctx)
	ok(t, err)
	_, err = sb.Redo(ctx)
	ok(t, err)
	_, err = sb.Restore(ctx, cp.Checkpoint.ID)
	ok(t, err)
	forked, err := sb.Fork(ctx, cp.Checkpoint.ID)
	if ok(t, err); forked.At != cp.Checkpoint.ID || forked.Sandbox.ID == sb.ID {
		t.Errorf("fork: %+v", forked)
	}
	ok(t, c.Sandbox(forked.Sandbox.ID).Delete(ctx))
	_, err = sb.Begin(ctx, "tx")
	ok(t, err)
	_, err = sb.Commit(ctx)
	ok(t, err)
	_, err = sb.Begin(ctx, "tx2")
	ok(t, err)
	_, err = sb.Rollback(ctx)
	ok(t, err)
	_, err = sb.HistoryEvents(ctx, 0, 10)
	ok(t, err)
	var export bytes.Buffer
	ok(t, sb.ExportHistory(ctx, &export))
	fresh, err := c.Sandboxes.Create(ctx, paddock.SandboxSpec{})
	ok(t, err)
	_, err = fresh.ImportHistory(ctx, &export)
	ok(t, err)
	ok(t, fresh.Delete(ctx))
	// Without a backup store the backup routes answer 409 naming the section.
	if _, err := sb.BackupNow(ctx); !errors.Is(err, paddock.ErrFailedPrecondition) {
		t.Errorf("backup now without a store: %v", err)
	}
	if _, err := sb.Backups(ctx); !errors.Is(err, paddock.ErrFailedPrecondition) {
		t.Errorf("backups without a store: %v", err)
	}
	if _, err := sb.RestoreBackup(ctx, paddock.BackupRestoreRequest{}); !errors.Is(err, paddock.ErrFailedPrecondition) {
		t.Errorf("restore without a store: %v", err)
	}
	if _, err := admin.BackupSandboxes(ctx); !errors.Is(err, paddock.ErrFailedPrecondition) {
		t.Errorf("the store's sandboxes without a store: %v", err)
	}
	if _, err := admin.PruneBackups(ctx, paddock.BackupPruneRequest{DryRun: true}); !errors.Is(err, paddock.ErrFailedPrecondition) {
		t.Errorf("prune without a store: %v", err)
	}

	// Policy, capabilities, the app.
	_, err = sb.SetPolicy(ctx, []byte("shell:\n  deny: [\"touch /workspace/x\"]\n"))
	ok(t, err)
	pol, err := sb.Policy(ctx)
	if ok(t, err); pol.Source == "" {
		t.Errorf("policy: %+v", pol)
	}
	ok(t, sb.DeletePolicy(ctx))
	capa, err := sb.MintCapability(ctx, paddock.CapabilityRequest{Resource: "exec:*", Actions: []string{"exec"}, TTLSeconds: 600})
	ok(t, err)
	caps, err := sb.Capabilities(ctx)
	if ok(t, err); len(caps) != 1 {
		t.Errorf("capabilities: %+v", caps)
	}
	_, err = sb.RevokeCapability(ctx, capa.ID)
	ok(t, err)
	if _, err := sb.App(ctx); err != nil && errors.Is(err, paddock.ErrUnavailable) {
		t.Errorf("app: %v", err)
	}
	if _, err := sb.RestartApp(ctx); err != nil && errors.Is(err, paddock.ErrUnavailable) {
		t.Errorf("app restart: %v", err)
	}

	// Runtime providers, and choosing the app.
	var steps []paddock.ProviderEvent
	step, err := c.AppStep(ctx, sb.ID, "new", paddock.ProviderRequest{Runtime: "static", Name: "site", Dir: "site"}, func(ev paddock.ProviderEvent) { steps = append(steps, ev) })
	if ok(t, err); step.Runtime != "static" || len(steps) < 2 {
		t.Errorf("app new: %+v, events %+v", step, steps)
	}
	step, err = c.AppStep(ctx, sb.ID, "package", paddock.ProviderRequest{Dir: "site"}, nil)
	ok(t, err)
	arts, err := c.Artifacts(ctx)
	if ok(t, err); len(arts) != 1 || arts[0].ID != step.ArtifactID {
		t.Errorf("artifacts: %+v, package %+v", arts, step)
	}
	art, err := c.Artifact(ctx, step.ArtifactID)
	if ok(t, err); art.Manifest == nil || art.Manifest.Runtime != "static" {
		t.Errorf("artifact: %+v", art)
	}
	var archive, sbom bytes.Buffer
	_, err = c.DownloadArtifact(ctx, step.ArtifactID, &archive)
	ok(t, err)
	_, err = c.ArtifactSBOM(ctx, step.ArtifactID, &sbom)
	if ok(t, err); archive.Len() == 0 || !strings.Contains(sbom.String(), "CycloneDX") {
		t.Errorf("artifact download: %d bytes, sbom %q", archive.Len(), sbom.String())
	}
	live, err := c.Release(ctx, step.ArtifactID)
	if ok(t, err); live.Role != "live" || !strings.HasPrefix(live.App.Dir, ".paddock/release/") {
		t.Errorf("release: %+v", live)
	}
	info, err := c.SetApp(ctx, sb.ID, paddock.Template{})
	if ok(t, err); len(info.App.Command) == 0 {
		t.Errorf("app reset: %+v", info.App)
	}
	ok(t, c.DeleteArtifact(ctx, step.ArtifactID))
	arts, err = c.Artifacts(ctx)
	if ok(t, err); len(arts) != 0 {
		t.Errorf("artifacts after the delete: %+v", arts)
	}

	// Lifecycle.
	for _, op := range []func(*paddock.Sandbox, context.Context) (paddock.SandboxInfo, error){(*paddock.Sandbox).Stop, (*paddock.Sandbox).Start, (*paddock.Sandbox).Restart} {
		_, err := op(sb, ctx)
		ok(t, err)
	}
	info, err = sb.Describe(ctx)
	if ok(t, err); info.State != paddock.StateRunning {
		t.Errorf("after restart: %+v", info)
	}

	// The account.
	_, err = c.Roles(ctx)
	ok(t, err)
	promoted, err := c.Promote(ctx)
	if ok(t, err); promoted.Mode != paddock.PromoteSwap {
		t.Errorf("promote without a provider: mode %q, want swap", promoted.Mode)
	}
	if _, err := c.PromoteMode(ctx, paddock.PromoteRelease); !errors.Is(err, paddock.ErrFailedPrecondition) {
		t.Errorf("promote release with no artifact: %v, want a conflict", err)
	}
	secret, err := c.PutSecret(ctx, "gh_token", "s3cr3t-value")
	ok(t, err)
	secrets, err := c.ListSecrets(ctx)
	ok(t, err)
	if len(secrets) != 1 || strings.Contains(fmt.Sprintf("%+v %+v", secret, secrets), "s3cr3t-value") {
		t.Errorf("secrets: %+v", secrets)
	}
	ok(t, c.DeleteSecret(ctx, "gh_token"))
	nt, err := admin.CreateToken(ctx, paddock.CreateTokenRequest{Name: "ci"})
	ok(t, err)
	_, err = admin.ListTokens(ctx)
	ok(t, err)
	ok(t, admin.RevokeToken(ctx, nt.ID))
	inv, err := admin.CreateInvite(ctx, paddock.CreateInviteRequest{Uses: 1})
	ok(t, err)
	_, err = admin.ListInvites(ctx)
	ok(t, err)
	ok(t, admin.RevokeInvite(ctx, inv.ID))
	users, err := admin.ListUsers(ctx)
	if ok(t, err); len(users) != 2 {
		t.Errorf("users: %+v", users)
	}
	events, err := c.Events(ctx, paddock.EventQuery{Action: "sandbox.create", Limit: 5})
	if ok(t, err); len(events) == 0 {
		t.Errorf("no sandbox.create event")
	}
	ok(t, c.RecordMCPToolCall(ctx, paddock.MCPToolCall{Tool: "read_file", Sandbox: sb.ID}))
	events, err = c.Events(ctx, paddock.EventQuery{Action: "mcp.tool_call", Limit: 1})
	if ok(t, err); len(events) != 1 || events[0].Detail["sandbox"] != sb.ID || events[0].Detail["transport"] != "stdio" {
		t.Errorf("mcp.tool_call events: %+v", events)
	}
	ok(t, sb.Delete(ctx))
	if _, err := sb.Describe(ctx); !errors.Is(err, paddock.ErrNotFound) {
		t.Errorf("after delete: %v", err)
	}

	metrics := e.Metrics(t)
	for _, rt := range e.Server.Routes() {
		if !strings.HasPrefix(rt.Pattern, "/api/v1/") {
			continue // the seed's /me/secrets, served under /api/v1 too
		}
		if !regexp.MustCompile(`route="` + regexp.QuoteMeta(rt.Method+" "+rt.Pattern) + `"`).MatchString(metrics) {
			t.Errorf("no call of package paddock reached %s %s", rt.Method, rt.Pattern)
		}
	}
}

func ok(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
