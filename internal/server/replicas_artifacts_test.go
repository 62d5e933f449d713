package server_test

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/store/pgtest"
	"github.com/paddockhq/paddock/internal/testenv"
)

// An artifact's bytes stay with the replica that packaged it, and any replica lists it,
// downloads it (forwarded to its holder) and releases it (into the live sandbox, wherever
// that runs, the archive fetched from its holder). Once the holder is dead, a download
// through another replica is a 503 naming it, answered at once.
func TestReplicasArtifacts(t *testing.T) {
	testenv.RequireRoot(t)
	dbURL := pgtest.URL(t)
	rs := startReplicas(t, dbURL, 2)
	alice := (&servertest.Env{URL: rs[0].url}).Register(t, "alice") // her roles run on r1
	far := *alice
	far.Base = rs[1].url
	var roles api.Roles
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/roles", nil), http.StatusOK, &roles)
	// A sandbox of hers on r2, packaged there.
	var sb api.Sandbox
	servertest.Decode(t, far.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "p"}), http.StatusCreated, &sb)
	if r := result(providerStep(t, alice, sb.ID, "new", api.ProviderRequest{Runtime: "static", Name: "my-site", Dir: "site"})); r.Error != "" {
		t.Fatalf("new: %+v", r)
	}
	execOK(t, alice, sb.ID, "sh", "-c", `sed -i 's|<h1>|<h1 id="from-r2">|' site/index.html`)
	evs := providerStep(t, alice, sb.ID, "package", api.ProviderRequest{Dir: "site"})
	r := result(evs)
	if r.Error != "" || len(r.ArtifactID) != 64 {
		t.Fatalf("package: result %+v; log:\n%s", r, logText(evs))
	}
	id := r.ArtifactID

	download := func(c *servertest.Client, what string) (int, []byte) {
		t.Helper()
		resp := c.DoToken("GET", "/api/v1/artifacts/"+id+what, nil)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	for _, c := range []*servertest.Client{alice, &far} {
		var list api.ArtifactList
		servertest.Decode(t, c.DoToken("GET", "/api/v1/artifacts", nil), http.StatusOK, &list)
		if len(list.Artifacts) != 1 || list.Artifacts[0].ID != id {
			t.Errorf("artifacts through %s: %+v", c.Base, list)
		}
		code, body := download(c, "/archive")
		if sum := sha256.Sum256(body); code != http.StatusOK || hex.EncodeToString(sum[:]) != id {
			t.Errorf("the archive through %s: %d, %d bytes not the artifact's (%.200s)", c.Base, code, len(body), body)
		}
		if code, body := download(c, "/sbom"); code != http.StatusOK || !strings.Contains(string(body), "CycloneDX") {
			t.Errorf("the SBOM through %s: %d %.200s", c.Base, code, body)
		}
	}

	// Released through r2 into the live sandbox, which r1 runs: r1 fetches the archive
	// from r2.
	var live api.Sandbox
	servertest.Decode(t, far.DoToken("POST", "/api/v1/artifacts/"+id+"/release", nil), http.StatusOK, &live)
	if live.ID != roles.Live.ID {
		t.Fatalf("release: %+v, want the live sandbox %s", live, roles.Live.ID)
	}
	if page := execOK(t, alice, roles.Live.ID, "cat", ".paddock/release/"+id[:12]+"/index.html"); !strings.Contains(page, `id="from-r2"`) {
		t.Errorf("the released page: %q", page)
	}

	// r2 dead: its artifact is still listed, and its download answers 503 naming r2.
	servertest.Decode(t, far.DoToken("DELETE", "/api/v1/sandboxes/"+sb.ID, nil), http.StatusNoContent, nil)
	rs[1].kill()
	began := time.Now()
	var list api.ArtifactList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/artifacts", nil), http.StatusOK, &list)
	if len(list.Artifacts) != 1 {
		t.Errorf("artifacts through r1 with r2 dead: %+v", list)
	}
	code, body := download(alice, "/archive")
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "r2") {
		t.Errorf("the archive held by a dead r2, through r1: %d %.300s, want 503 naming r2", code, body)
	}
	if d := time.Since(began); d > time.Minute {
		t.Errorf("a dead holder took %s to answer", d.Round(time.Second))
	}
}
