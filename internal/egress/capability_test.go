package egress

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/capability"
	"github.com/paddockhq/paddock/internal/policy"
)

// tokens mints and verifies capability tokens with a real keyring, as the control plane
// does for the proxy (server.egressCapabilities).
type tokens struct {
	mint    *capability.Minter
	verify  *capability.Verifier
	revoked *capability.MemoryRevocationList
}

func newTokens(t *testing.T) *tokens {
	t.Helper()
	keys, err := capability.NewKeyring(1, map[uint32]capability.RootKey{1: capability.NewRootKey()})
	if err != nil {
		t.Fatal(err)
	}
	revoked := capability.NewMemoryRevocationList()
	return &tokens{mint: capability.NewMinter(keys), verify: capability.NewVerifier(keys, revoked), revoked: revoked}
}

func (k *tokens) VerifyConnect(ctx context.Context, sandbox, token, resource string) (string, error) {
	d, err := k.verify.Verify(ctx, token, capability.Request{Subject: "sandbox:" + sandbox, Resource: resource, Action: capability.Connect})
	if err != nil {
		return "", err
	}
	return d.Claims.ID, nil
}

// token mints a connect token for resource, held by sandbox.
func (k *tokens) token(t *testing.T, sandbox, resource string) capability.Token {
	t.Helper()
	tok, err := k.mint.Mint(capability.Claims{Subject: "sandbox:" + sandbox, Resource: resource, Actions: []capability.Action{capability.Connect},
		Constraints: capability.Constraints{Expiry: time.Now().Add(time.Hour)}})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// capabilityHarness is a proxy whose policy is testPolicy, with require_capability as asked.
func capabilityHarness(t *testing.T, require bool) (*harness, *tokens) {
	t.Helper()
	k := newTokens(t)
	text := testPolicy
	if require {
		text += "  require_capability: true\n"
	}
	pol, err := policy.Load([]byte(text), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return newHarness(t, func(o *Options) { o.Decider, o.Capabilities = pol, k }), k
}

func TestCapabilityPrefix(t *testing.T) {
	if tok := newTokens(t).token(t, sandboxID, "net:allowed.test"); !strings.HasPrefix(tok.Encoded(), capabilityPrefix) {
		t.Fatalf("a token's wire form %q does not start with %q", tok.Encoded(), capabilityPrefix)
	}
}

// With network.require_capability, a connection needs a net: token that allows its host,
// held by the sandbox it came from, unrevoked, within what the policy allows; the token
// comes as the proxy URL's user name (Basic) or as a Bearer credential, never reaches the
// upstream, and is named by its ID, never itself, in the audit trail and in refusals.
func TestCapabilityRequired(t *testing.T) {
	h, k := capabilityHarness(t, true)
	allowed := k.token(t, sandboxID, "net:allowed.test")
	wild := k.token(t, sandboxID, "net:*.wild.test")
	unlisted := k.token(t, sandboxID, "net:unlisted.test")
	others := k.token(t, "sbx-other", "net:allowed.test")
	revoked := k.token(t, sandboxID, "net:allowed.test")
	if err := k.revoked.Revoke(revoked.Claims.ID); err != nil {
		t.Fatal(err)
	}
	get := func(t *testing.T, user *url.Userinfo, u string) (int, string, http.Header) {
		t.Helper()
		res, err := h.client(user).Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body), res.Header
	}
	// refused sends the request raw (a client library hides a refused CONNECT's answer).
	refused := func(t *testing.T, user *url.Userinfo, u string) (int, string, http.Header) {
		t.Helper()
		res, body, _, _ := h.raw(proxyRequest(u, user))
		return res.StatusCode, body, res.Header
	}
	secure := func(host string) string { return fmt.Sprintf("https://%s:%d/", host, h.sport) }
	plain := func(host string) string { return fmt.Sprintf("http://%s:%d/echo", host, h.pport) }

	t.Run("a token for the host, as the proxy's user name", func(t *testing.T) {
		for _, u := range []string{secure("allowed.test"), plain("allowed.test")} {
			if code, body, _ := get(t, url.User(allowed.Encoded()), u); code != 200 {
				t.Errorf("GET %s: %d %q, want 200", u, code, body)
			}
		}
		if e := h.waitEvent("allowed.test", StageOpened); e.Capability != allowed.Claims.ID {
			t.Errorf("opened event names capability %q, want %s", e.Capability, allowed.Claims.ID)
		}
		if seen := h.lastSeen(); seen.Header.Get("Proxy-Authorization") != "" {
			t.Errorf("the token reached the upstream: %v", seen.Header)
		}
	})
	t.Run("a wildcard token", func(t *testing.T) {
		if code, body, _ := get(t, url.User(wild.Encoded()), secure("ok.wild.test")); code != 200 {
			t.Errorf("%d %q, want 200", code, body)
		}
	})
	t.Run("a Bearer token", func(t *testing.T) {
		res, body, _, _ := h.raw(fmt.Sprintf("GET http://allowed.test:%d/echo HTTP/1.1\r\nHost: allowed.test:%d\r\nProxy-Authorization: Bearer %s\r\nConnection: close\r\n\r\n",
			h.pport, h.pport, allowed.Encoded()))
		if res.StatusCode != 200 {
			t.Errorf("%d %q, want 200", res.StatusCode, body)
		}
	})

	refusals := []struct {
		name   string
		user   *url.Userinfo
		url    string
		status int
		reason string
	}{
		{"no token", nil, secure("allowed.test"), http.StatusProxyAuthRequired, "requires a net: capability token"},
		{"no token, plain HTTP", nil, plain("allowed.test"), http.StatusProxyAuthRequired, "requires a net: capability token"},
		{"another host's token", url.User(allowed.Encoded()), secure("other.test"), http.StatusForbidden, "net:other.test"},
		{"another sandbox's token", url.User(others.Encoded()), secure("allowed.test"), http.StatusForbidden, "sandbox:sbx-other"},
		{"a revoked token", url.User(revoked.Encoded()), secure("allowed.test"), http.StatusForbidden, "revoked"},
		{"a garbled token", url.User(capabilityPrefix + "AAAA"), secure("allowed.test"), http.StatusForbidden, "capability"},
		{"credentials that are no token", url.UserPassword("user", "secret"), secure("allowed.test"), http.StatusProxyAuthRequired, "requires a net: capability token"},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			code, body, hdr := refused(t, tt.user, tt.url)
			t.Logf("%d %s", code, body)
			if code != tt.status || !strings.Contains(body, tt.reason) || !strings.Contains(body, "(rule egress.capability)") {
				t.Errorf("%d %q, want %d saying %q (rule egress.capability)", code, body, tt.status, tt.reason)
			}
			if tt.status == http.StatusProxyAuthRequired && !strings.HasPrefix(hdr.Get("Proxy-Authenticate"), "Basic ") {
				t.Errorf("a 407 without a Basic challenge: %v", hdr)
			}
		})
	}
	// A token cannot widen the policy: unlisted.test is refused by the policy's own rule.
	if code, body, _ := refused(t, url.User(unlisted.Encoded()), secure("unlisted.test")); code != 403 || !strings.Contains(body, "rule network.default") {
		t.Errorf("a token for a host the policy does not allow: %d %q, want 403 by network.default", code, body)
	}

	h.mu.Lock()
	trail := fmt.Sprintf("%+v", h.events)
	h.mu.Unlock()
	for _, tok := range []capability.Token{allowed, wild, others, revoked, unlisted} {
		if strings.Contains(trail, tok.Encoded()) || strings.Contains(trail, base64.StdEncoding.EncodeToString([]byte(tok.Encoded()+":"))) {
			t.Errorf("the audit trail holds a token itself")
		}
	}
}

// Without require_capability, a request without a token is decided by the policy alone,
// as before, and one with a token is held to it: a token narrows what its holder may reach.
func TestCapabilityNarrows(t *testing.T) {
	h, k := capabilityHarness(t, false)
	onlyOther := k.token(t, sandboxID, "net:other.test")
	for _, tt := range []struct {
		user   *url.Userinfo
		host   string
		status int
	}{
		{nil, "allowed.test", 200},
		{url.UserPassword("user", "secret"), "allowed.test", 200},
		{url.User(onlyOther.Encoded()), "other.test", 200},
		{url.User(onlyOther.Encoded()), "allowed.test", 403},
	} {
		res, body, _, _ := h.raw(proxyRequest(fmt.Sprintf("https://%s:%d/", tt.host, h.sport), tt.user))
		if res.StatusCode != tt.status {
			t.Errorf("%s with %v: %d %q, want %d", tt.host, tt.user, res.StatusCode, body, tt.status)
		}
	}
}

// A proxy given no verifier refuses a request that carries a token rather than ignore it.
func TestCapabilityWithoutVerifier(t *testing.T) {
	h := newHarness(t, nil)
	tok := newTokens(t).token(t, sandboxID, "net:allowed.test")
	res, body, _, _ := h.raw(proxyRequest(fmt.Sprintf("https://allowed.test:%d/", h.sport), url.User(tok.Encoded())))
	if res.StatusCode != 403 || !strings.Contains(body, "takes no capability tokens") {
		t.Errorf("%d %q, want 403: takes no capability tokens", res.StatusCode, body)
	}
}

// proxyRequest is what a client sends the proxy for u, with user as Basic proxy
// credentials: a CONNECT for https, a plain GET otherwise; the connection closes after.
func proxyRequest(u string, user *url.Userinfo) string {
	p, _ := url.Parse(u)
	auth := ""
	if user != nil {
		pass, _ := user.Password()
		auth = "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(user.Username()+":"+pass)) + "\r\n"
	}
	if p.Scheme == "https" {
		return "CONNECT " + p.Host + " HTTP/1.1\r\nHost: " + p.Host + "\r\n" + auth + "\r\n"
	}
	return "GET " + u + " HTTP/1.1\r\nHost: " + p.Host + "\r\n" + auth + "Connection: close\r\n\r\n"
}
