package cli_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/servertest"
)

// paddock app runs a provider's steps in the user's dev sandbox, printing each command as
// it starts and the result; without --dir the workspace's one project is the step's, and a
// directory no provider recognises fails saying what was looked for.
func TestAppCommands(t *testing.T) {
	e := servertest.Start(t)
	e.Register(t, "alice")
	signedOut(t)
	mustRemote(t, "alice\ncorrect horse battery alice\n", "login", e.URL)

	out := mustRemote(t, "", "app", "new", "--runtime", "static", "my-site")
	for _, want := range []string{"==> scaffold [1/2] write index.html\n", "==> scaffold [2/2] write style.css\n", "new: done (static project in my-site)\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("app new: %q, want %q", out, want)
		}
	}
	wantFailure(t, "", "--timeout 1.5s: want whole seconds up to 1h0m0s", "app", "build", "--timeout", "1.5s")
	wantFailure(t, "", "--timeout 2h0m0s: want whole seconds up to 1h0m0s", "app", "package", "--timeout", "2h")
	out = mustRemote(t, "", "app", "package", "--dir", "my-site", "--timeout", "2m")
	if !strings.Contains(out, "package: my-site/.paddock/package/static.tar.gz\n") {
		t.Errorf("app package: %q", out)
	}
	id := regexp.MustCompile(`artifact: ([0-9a-f]{64})`).FindStringSubmatch(out)
	if id == nil {
		t.Fatalf("app package names no artifact: %q", out)
	}
	if out := mustRemote(t, "", "app", "artifacts"); !regexp.MustCompile(id[1] + ` +static +my-site `).MatchString(out) {
		t.Errorf("app artifacts: %q", out)
	}
	dst := filepath.Join(t.TempDir(), "site.tar.gz")
	mustRemote(t, "", "app", "download", id[1], "-o", dst)
	b, err := os.ReadFile(dst)
	if sum := sha256.Sum256(b); err != nil || hex.EncodeToString(sum[:]) != id[1] {
		t.Errorf("app download: %d bytes, %v, not the artifact", len(b), err)
	}
	if out := mustRemote(t, "", "app", "download", "--sbom", "-o", "-", id[1]); !strings.Contains(out, `"bomFormat": "CycloneDX"`) {
		t.Errorf("app download --sbom: %q", out)
	}
	wantFailure(t, "", "want the archive's SHA-256", "app", "download", "nope")
	if out := mustRemote(t, "", "app", "release"); !strings.Contains(out, "released "+id[1]+": live sandbox") || !strings.Contains(out, "in .paddock/release/"+id[1][:12]) {
		t.Errorf("app release: %q", out)
	}
	out = mustRemote(t, "", "app", "preview", "--dir", "my-site")
	if !strings.Contains(out, "on port 8080 (reloads changes by itself)") {
		t.Errorf("app preview: %q", out)
	}
	// Dev runs the dev server and has a build: promote releases it into live.
	if out := mustRemote(t, "", "promote"); !strings.HasPrefix(out, "released artifact "+id[1][:12]+" into live ") || !strings.Contains(out, "keeps its dev server\n") || strings.Contains(out, "note:") {
		t.Errorf("promote: %q, want a release of %s", out, id[1][:12])
	}
	wantFailure(t, "", "none of the others can be", "promote", "--swap", "--release")
	if out := mustRemote(t, "", "promote", "--swap"); !strings.HasPrefix(out, "swapped: live is now ") {
		t.Errorf("promote --swap: %q", out)
	}
	wantFailure(t, "", "no artifact packaged from the dev sandbox", "promote", "--release")
	mustRemote(t, "", "promote", "--swap")
	if out := mustRemote(t, "", "app", "artifacts"); !regexp.MustCompile(id[1] + ` +static +my-site .* local\n`).MatchString(out) {
		t.Errorf("app artifacts, its copies: %q", out)
	}
	if out := mustRemote(t, "", "app", "artifacts", "rm", id[1]); out != "deleted "+id[1]+"\n" {
		t.Errorf("app artifacts rm: %q", out)
	}
	if out := mustRemote(t, "", "app", "artifacts"); !strings.Contains(out, "no artifacts") {
		t.Errorf("app artifacts after rm: %q", out)
	}
	wantFailure(t, "", "not found", "app", "artifacts", "rm", id[1])
	// Without --dir, the workspace's one project (my-site) is the one built.
	mustRemote(t, "", "app", "build")
	wantFailure(t, "", "looked for package.json (node), go.mod (go), Cargo.toml (rust), index.html (static)", "app", "build", "--dir", "empty")
	wantFailure(t, "", "want one of node, go, rust, static", "app", "new", "--runtime", "cobol", "x")
}
