package server_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
)

// A package is stored by the control plane under its SHA-256, with a manifest naming the
// checkpoint it was built from and every file's digest, and a CycloneDX SBOM; it is the
// packaging user's alone, listed and downloadable under /api/v1/artifacts.
func TestArtifactStored(t *testing.T) {
	e := servertest.Start(t)
	alice, bob := e.Register(t, "alice"), e.Register(t, "bob")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "p"}), http.StatusCreated, &sb)
	if r := result(providerStep(t, alice, sb.ID, "new", api.ProviderRequest{Runtime: "static", Name: "my-site", Dir: "site"})); r.Error != "" {
		t.Fatalf("new: %+v", r)
	}
	evs := providerStep(t, alice, sb.ID, "package", api.ProviderRequest{Dir: "site"})
	r := result(evs)
	if r.Error != "" || len(r.ArtifactID) != 64 {
		t.Fatalf("package: result %+v; log:\n%s", r, logText(evs))
	}
	id := r.ArtifactID

	var list api.ArtifactList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/artifacts", nil), http.StatusOK, &list)
	if len(list.Artifacts) != 1 || list.Artifacts[0].ID != id || list.Artifacts[0].SandboxID != sb.ID || list.Artifacts[0].Runtime != "static" {
		t.Fatalf("alice's artifacts: %+v", list)
	}
	var art api.Artifact
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/artifacts/"+id, nil), http.StatusOK, &art)
	m := art.Manifest
	if m == nil || m.SHA256 != id || m.Dir != "site" || m.Checkpoint == "" {
		t.Fatalf("artifact: %+v", art)
	}
	page := execOK(t, alice, sb.ID, "cat", "site/index.html")
	sum := sha256.Sum256([]byte(page))
	found := false
	for _, f := range m.Files {
		found = found || f.Path == "index.html" && f.SHA256 == hex.EncodeToString(sum[:]) && f.Size == int64(len(page))
	}
	if !found {
		t.Errorf("the manifest's files %+v, want index.html with its SHA-256", m.Files)
	}

	resp := alice.DoToken("GET", "/api/v1/artifacts/"+id+"/archive", nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	got := sha256.Sum256(body)
	if resp.StatusCode != http.StatusOK || hex.EncodeToString(got[:]) != id {
		t.Fatalf("download: %d, %d bytes whose SHA-256 is not the artifact's id", resp.StatusCode, len(body))
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for tr := tar.NewReader(zr); ; {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
	}
	if !strings.Contains(strings.Join(names, " "), "./index.html") {
		t.Errorf("the downloaded archive holds %q", names)
	}

	resp = alice.DoToken("GET", "/api/v1/artifacts/"+id+"/sbom", nil)
	var bom struct {
		BOMFormat string `json:"bomFormat"`
		Metadata  struct {
			Component struct {
				Name   string
				Hashes []struct{ Alg, Content string }
			}
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&bom)
	resp.Body.Close()
	if err != nil || bom.BOMFormat != "CycloneDX" || bom.Metadata.Component.Name != "site" || len(bom.Metadata.Component.Hashes) != 1 || bom.Metadata.Component.Hashes[0].Content != id {
		t.Errorf("sbom: %+v, %v", bom, err)
	}

	for _, p := range []string{"", "/archive", "/sbom"} {
		servertest.ErrorOf(t, bob.DoToken("GET", "/api/v1/artifacts/"+id+p, nil), http.StatusNotFound)
	}
	servertest.Decode(t, bob.DoToken("GET", "/api/v1/artifacts", nil), http.StatusOK, &list)
	if len(list.Artifacts) != 0 {
		t.Errorf("bob lists %+v", list)
	}
	if msg := servertest.ErrorOf(t, alice.DoToken("GET", "/api/v1/artifacts/nope", nil), http.StatusBadRequest).Message; !strings.Contains(msg, "SHA-256") {
		t.Errorf("a malformed id: %q", msg)
	}

	// Without a backup store the bytes have one copy, in the data dir; deleting the
	// artifact removes them.
	if strings.Join(art.Copies, ",") != api.ArtifactCopyLocal || art.Bucket != "" {
		t.Errorf("copies without a backup store: %v, bucket %q; want local alone", art.Copies, art.Bucket)
	}
	servertest.ErrorOf(t, bob.DoToken("DELETE", "/api/v1/artifacts/"+id, nil), http.StatusNotFound)
	blob := filepath.Join(e.Config.Runner.DataDir, "artifacts", "sha256", id)
	if _, err := os.Stat(blob); err != nil {
		t.Fatalf("the archive in the data dir: %v", err)
	}
	servertest.Decode(t, alice.DoToken("DELETE", "/api/v1/artifacts/"+id, nil), http.StatusNoContent, nil)
	if _, err := os.Stat(blob); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the archive after the delete: %v, want gone", err)
	}
	servertest.ErrorOf(t, alice.DoToken("GET", "/api/v1/artifacts/"+id+"/archive", nil), http.StatusNotFound)
	servertest.ErrorOf(t, alice.DoToken("DELETE", "/api/v1/artifacts/"+id, nil), http.StatusNotFound)
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/artifacts", nil), http.StatusOK, &list)
	if len(list.Artifacts) != 0 {
		t.Errorf("alice's artifacts after the delete: %+v", list)
	}
}

// A release makes the live sandbox serve a stored package while dev keeps its own app;
// another user cannot release one's artifact.
func TestReleaseServesArtifact(t *testing.T) {
	e := servertest.Start(t)
	alice, bob := e.Register(t, "alice"), e.Register(t, "bob")
	var roles api.Roles
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/roles", nil), http.StatusOK, &roles)
	dev := roles.Dev.ID
	if r := result(providerStep(t, alice, dev, "new", api.ProviderRequest{Runtime: "static", Name: "my-site", Dir: "site"})); r.Error != "" {
		t.Fatalf("new: %+v", r)
	}
	execOK(t, alice, dev, "sh", "-c", `sed -i 's|<h1>|<h1 id="released">|' site/index.html`)
	r := result(providerStep(t, alice, dev, "package", api.ProviderRequest{Dir: "site"}))
	if r.Error != "" || r.ArtifactID == "" {
		t.Fatalf("package: %+v", r)
	}
	var before api.Sandbox
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+dev, nil), http.StatusOK, &before)

	servertest.ErrorOf(t, bob.DoToken("POST", "/api/v1/artifacts/"+r.ArtifactID+"/release", nil), http.StatusNotFound)
	var live api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/artifacts/"+r.ArtifactID+"/release", nil), http.StatusOK, &live)
	if live.ID != roles.Live.ID || live.App.Dir != ".paddock/release/"+r.ArtifactID[:12] || live.App.HotReload {
		t.Fatalf("release: %+v (app %+v), want the live sandbox %s serving the release", live, live.App, roles.Live.ID)
	}
	alice.Handoff(alice.AppURL("live"))
	resp, err := alice.HTTP.Get(alice.AppURL("live") + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), `<h1 id="released">my-site</h1>`) {
		t.Errorf("live serves %d %q, want the packaged page", resp.StatusCode, page)
	}
	var after api.Sandbox
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+dev, nil), http.StatusOK, &after)
	if b, a := fmt.Sprint(before.App), fmt.Sprint(after.App); a != b {
		t.Errorf("the release changed dev's app from %s to %s", b, a)
	}
}

// page is what c's browser gets at url, after the host's handoff.
func page(t *testing.T, c *servertest.Client, host, p string) (int, string) {
	t.Helper()
	c.Handoff(host)
	resp, err := c.HTTP.Get(host + p)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The flow: preview in dev, package, promote. Live serves the packaged build and
// dev keeps its dev server; a promotion after further edits still releases but says the
// build is older than dev; --swap swaps; a release with no artifact is refused.
func TestPromoteReleasesPackagedBuild(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var roles api.Roles
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/roles", nil), http.StatusOK, &roles)
	dev := roles.Dev.ID
	if r := result(providerStep(t, alice, dev, "new", api.ProviderRequest{Runtime: "static", Name: "my-site", Dir: "site"})); r.Error != "" {
		t.Fatalf("new: %+v", r)
	}
	execOK(t, alice, dev, "sh", "-c", `sed -i 's|<h1>|<h1 id="released">|' site/index.html`)
	if r := result(providerStep(t, alice, dev, "preview", api.ProviderRequest{Dir: "site"})); r.Error != "" {
		t.Fatalf("preview: %+v", r)
	}
	pkg := result(providerStep(t, alice, dev, "package", api.ProviderRequest{Dir: "site"}))
	if pkg.Error != "" || pkg.ArtifactID == "" {
		t.Fatalf("package: %+v", pkg)
	}

	var got api.Roles
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/promote", nil), http.StatusOK, &got)
	if got.Mode != api.PromoteRelease || got.Artifact != pkg.ArtifactID || got.Note != "" {
		t.Fatalf("promote: mode %q artifact %q note %q, want a release of %s with no note", got.Mode, got.Artifact, got.Note, pkg.ArtifactID)
	}
	if got.Live.ID != roles.Live.ID || got.Dev.ID != dev || got.Generation != roles.Generation {
		t.Fatalf("promote moved the roles: live %s dev %s generation %d, want %s %s %d", got.Live.ID, got.Dev.ID, got.Generation, roles.Live.ID, dev, roles.Generation)
	}
	if got.Dev.App.Provider != "static" || got.Live.App.Provider != "" || got.Live.App.Dir != ".paddock/release/"+pkg.ArtifactID[:12] {
		t.Fatalf("promote: live app %+v, dev app %+v: want the release live and the dev server in dev", got.Live.App, got.Dev.App)
	}
	// An edit in dev shows on dev's host (its dev server serves the files) and not live's.
	execOK(t, alice, dev, "sh", "-c", `sed -i 's|my-site</h1>|my-site (editing)</h1>|' site/index.html`)
	if code, body := page(t, alice, alice.AppURL("live"), "/"); code != http.StatusOK || !strings.Contains(body, `<h1 id="released">my-site</h1>`) {
		t.Errorf("live serves %d %q, want the packaged page", code, body)
	}
	if code, body := page(t, alice, alice.AppURL("dev"), "/"); code != http.StatusOK || !strings.Contains(body, `my-site (editing)</h1>`) {
		t.Errorf("dev serves %d %q, want the edited page from its dev server", code, body)
	}

	// The only artifact is older than dev's workspace now: released, and said so.
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/promote", api.PromoteRequest{Mode: api.PromoteAuto}), http.StatusOK, &got)
	if got.Mode != api.PromoteRelease || got.Artifact != pkg.ArtifactID || !strings.Contains(got.Note, "run paddock app package") {
		t.Errorf("promote after an edit: mode %q artifact %q note %q, want the release with a note that dev changed", got.Mode, got.Artifact, got.Note)
	}

	servertest.ErrorOf(t, alice.DoToken("POST", "/api/v1/promote", map[string]string{"mode": "sideways"}), http.StatusBadRequest)
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/promote", api.PromoteRequest{Mode: api.PromoteSwap}), http.StatusOK, &got)
	if got.Mode != api.PromoteSwap || got.Live.ID != dev || got.Dev.ID != roles.Live.ID || got.Generation != roles.Generation+1 {
		t.Fatalf("promote --swap: mode %q live %s dev %s generation %d, want a swap", got.Mode, got.Live.ID, got.Dev.ID, got.Generation)
	}
	if code, body := page(t, alice, alice.AppURL("live"), "/"); code != http.StatusOK || !strings.Contains(body, `my-site (editing)</h1>`) {
		t.Errorf("after the swap live serves %d %q, want the dev server's page", code, body)
	}
	// The new dev (the old live) packaged nothing: a release is refused, naming what is
	// missing, and auto swaps.
	msg := servertest.ErrorOf(t, alice.DoToken("POST", "/api/v1/promote", api.PromoteRequest{Mode: api.PromoteRelease}), http.StatusConflict).Message
	if !strings.Contains(msg, "no artifact packaged from the dev sandbox") || !strings.Contains(msg, "paddock app package") {
		t.Errorf("release without an artifact: %q", msg)
	}
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/promote", nil), http.StatusOK, &got)
	if got.Mode != api.PromoteSwap || got.Live.ID != roles.Live.ID {
		t.Errorf("auto promote of a dev without a provider: mode %q live %s, want a swap back to %s", got.Mode, got.Live.ID, roles.Live.ID)
	}
	// Each promotion's event says what it did.
	var evs api.EventList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?action=roles.promote", nil), http.StatusOK, &evs)
	modes := map[any]int{}
	for _, ev := range evs.Events {
		modes[ev.Detail["mode"]]++
	}
	if len(evs.Events) != 4 || modes[api.PromoteRelease] != 2 || modes[api.PromoteSwap] != 2 {
		t.Errorf("roles.promote events by mode: %v, want 2 releases and 2 swaps", modes)
	}
}
