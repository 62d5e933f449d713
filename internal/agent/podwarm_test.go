package agent

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/wire"
	"github.com/paddockhq/paddock/internal/wire/podtls"
)

func warmClaimBody(t *testing.T, ca *podtls.CA, envID, certID string) []byte {
	t.Helper()
	pair, err := ca.IssueSandbox(certID)
	if err != nil {
		t.Fatal(err)
	}
	var env bytes.Buffer
	if err := wire.WriteEnvelope(&env, &wire.Envelope{Version: wire.EnvelopeVersion, SandboxID: envID, Tier: wire.TierContainer, Workspace: "/workspace", ListenAddr: ":7443"}); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(wire.WarmClaim{Envelope: env.Bytes(), Cert: pair.Cert, Key: pair.Key, CA: ca.CertPEM()})
	return b
}

// TestWarmClaimOnce: a warm agent takes one claim, whose certificate must be the sandbox's
// its envelope names; a second claim is refused.
func TestWarmClaimOnce(t *testing.T) {
	ca, err := podtls.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	w := &warm{dir: t.TempDir(), claimed: make(chan warmResult, 1)}
	post := func(body []byte) int {
		rec := httptest.NewRecorder()
		w.mux().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, wire.WarmClaimPath, bytes.NewReader(body)))
		return rec.Code
	}
	if code := post(warmClaimBody(t, ca, "sb-aaaaaaaaaa", "sb-bbbbbbbbbb")); code != http.StatusBadRequest {
		t.Fatalf("a claim whose certificate is another sandbox's: %d", code)
	}
	if code := post([]byte("{")); code != http.StatusBadRequest {
		t.Fatalf("a malformed claim: %d", code)
	}
	if code := post(warmClaimBody(t, ca, "sb-aaaaaaaaaa", "sb-aaaaaaaaaa")); code != http.StatusNoContent {
		t.Fatalf("a good claim: %d", code)
	}
	if res := <-w.claimed; res.env.SandboxID != "sb-aaaaaaaaaa" {
		t.Fatalf("claimed as %q", res.env.SandboxID)
	}
	if code := post(warmClaimBody(t, ca, "sb-cccccccccc", "sb-cccccccccc")); code != http.StatusConflict {
		t.Fatalf("a second claim: %d", code)
	}
	rec := httptest.NewRecorder()
	w.mux().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, wire.WarmIdentityPath, nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "no token") {
		t.Fatalf("identity without a token: %d %q", rec.Code, rec.Body.String())
	}
}
