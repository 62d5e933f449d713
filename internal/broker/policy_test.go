package broker

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

func TestParsePolicy(t *testing.T) {
	p, err := ParsePolicy([]byte(`
capabilities:
  github: {secrets: [github_token, gh_token], roles: [dev], users: [alice], ttl: 5m}
  npm: {secrets: [npm_token]}
`), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c := p.Capabilities["github"]; c.ttl() != 5*time.Minute || len(c.Secrets) != 2 {
		t.Errorf("github = %+v", c)
	}
	if c := p.Capabilities["npm"]; c.ttl() != DefaultTTL {
		t.Errorf("npm ttl = %v", c.ttl())
	}
	for _, tc := range []struct {
		name, user, role, why string
	}{
		{"github", "alice", "dev", ""},
		{"github", "alice", "live", "only to [dev] sandboxes, and this one is live"},
		{"github", "alice", "", "this one is no role"},
		{"github", "bob", "dev", "does not grant this capability to this user"},
		{"npm", "bob", "", ""},
		{"aws", "alice", "dev", "no such capability"},
	} {
		_, why, ok := p.decide(tc.name, tc.user, tc.role)
		if ok != (tc.why == "") || !strings.Contains(why, tc.why) {
			t.Errorf("decide(%s, %s, %s) = %v %q, want %q", tc.name, tc.user, tc.role, ok, why, tc.why)
		}
	}
}

func TestParsePolicyErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"capabilities:\n  gh: {secrets: [x], colour: red}\n", "field colour not found"},
		{"capabilities:\n  gh: {secrets: []}\n", "capabilities.gh.secrets: name at least one secret"},
		{"capabilities:\n  GH: {secrets: [x]}\n", "capabilities.GH: a capability name"},
		{"capabilities:\n  gh: {secrets: [\"a/b\"]}\n", `capabilities.gh.secrets[0]: "a/b" is not a secret name`},
		{"capabilities:\n  gh: {secrets: [x], roles: [admin]}\n", `capabilities.gh.roles[0]: "admin": want live or dev`},
		{"capabilities:\n  gh: {secrets: [x], ttl: 48h}\n", "capabilities.gh.ttl: 48h0m0s: want at most 24h0m0s"},
		{"capabilities:\n  gh: {secrets: [x], ttl: soon}\n", `line 2: ttl "soon"`},
		{"capabilities: [1]\n", "cannot unmarshal"},
	} {
		_, err := ParsePolicy([]byte(tc.yaml), "p.yaml")
		if err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) && !strings.Contains(err.Error(), "line") || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "p.yaml") {
			t.Errorf("ParsePolicy(%q) = %v, want an error saying %q", tc.yaml, err, tc.want)
		}
	}
	if p, err := ParsePolicy(nil, "empty"); err != nil || len(p.Capabilities) != 0 {
		t.Errorf("empty policy: %v %v", p, err)
	}
}

// FuzzParsePolicy: the policy parser never panics, and what it accepts is valid.
func FuzzParsePolicy(f *testing.F) {
	f.Add([]byte("capabilities:\n  gh: {secrets: [x], roles: [dev], ttl: 5m}\n"))
	f.Add([]byte("capabilities: {a: {secrets: [b]}}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePolicy(b, "fuzz")
		if err != nil {
			return
		}
		if err := p.validate(); err != nil {
			t.Fatalf("accepted an invalid policy: %v", err)
		}
	})
}
