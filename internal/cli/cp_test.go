package cli_test

import (
	"bytes"
	"crypto/rand"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
)

// paddock sandbox cp copies a tree with a file over exec's 5 MiB stdin bound into a
// sandbox and back out, the same; the sandbox sees it; a disk too small for an upload
// stops it with the limit named.
func TestSandboxCopy(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	signedOut(t)
	t.Setenv("PADDOCK_SERVER", e.URL)
	t.Setenv("PADDOCK_TOKEN", alice.Token)
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{}), http.StatusCreated, &sb)

	dir := t.TempDir()
	src := filepath.Join(dir, "site")
	big := make([]byte, 7<<20)
	rand.Read(big)
	for p, data := range map[string][]byte{"big.bin": big, "css/a.css": []byte("body{}\n"), "index.html": []byte("<p>hi</p>\n")} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, p), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("index.html", filepath.Join(src, "home.html")); err != nil {
		t.Fatal(err)
	}

	out, errOut, code := remote(t, "", "sandbox", "cp", src, sb.ID+":/workspace/www")
	if code != 0 || !strings.Contains(out, "3 files, 2 directories, 7340049 bytes") || !strings.Contains(errOut, "skipped symlink www/home.html") {
		t.Fatalf("cp in: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	var res api.ExecResult
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/exec", api.ExecRequest{Argv: []string{"sh", "-c", "cd /workspace/www && cat index.html css/a.css && stat -c %s big.bin"}}), http.StatusOK, &res)
	if string(res.Stdout) != "<p>hi</p>\nbody{}\n7340032\n" {
		t.Errorf("in the sandbox: %+v", res)
	}

	mustRemote(t, "", "sandbox", "cp", sb.ID+":www", filepath.Join(dir, "back"))
	if b, _ := os.ReadFile(filepath.Join(dir, "back", "big.bin")); !bytes.Equal(b, big) {
		t.Errorf("big.bin came back with %d bytes, not the same", len(b))
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "back", "css", "a.css")); string(b) != "body{}\n" {
		t.Errorf("css/a.css: %q", b)
	}
	// Into an existing directory: under the tree's own name.
	mustRemote(t, "", "sandbox", "cp", sb.ID+":www/index.html", filepath.Join(dir, "back"))
	mustRemote(t, "", "sandbox", "cp", filepath.Join(src, "index.html"), sb.ID+":www/css/")
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/exec", api.ExecRequest{Argv: []string{"cat", "/workspace/www/css/index.html"}}), http.StatusOK, &res)
	if string(res.Stdout) != "<p>hi</p>\n" {
		t.Errorf("copied into www/css/: %+v", res)
	}

	wantFailure(t, "", "neither", "sandbox", "cp", src, filepath.Join(dir, "x"))
	wantFailure(t, "", `"nothing": not found`, "sandbox", "cp", sb.ID+":nothing", filepath.Join(dir, "x"))

	out = mustRemote(t, "", "sandbox", "create", "--disk", "96M")
	small := strings.TrimSpace(out)
	huge := filepath.Join(dir, "huge.bin")
	f, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(160 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	wantFailure(t, "", "write up/huge.bin: the sandbox's disk limit (96MiB) was reached", "sandbox", "cp", huge, small+":up/")
}
