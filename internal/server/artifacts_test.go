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
