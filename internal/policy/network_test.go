package policy

import (
	"strings"
	"testing"
)

const networkPolicy = `
network:
  default: deny
  allow: ["registry.npmjs.org", "proxy.golang.org.", "*.example.com", "Bücher.example", "10.1.2.3", "[2001:db8::1]"]
  deny: ["evil.example.com", "*.bad.example.com", "10.9.9.9"]
`

func TestHost(t *testing.T) {
	p := mustLoad(t, networkPolicy)
	tests := []struct {
		host  string
		allow bool
		rule  string
		want  string
	}{
		{"registry.npmjs.org", true, "network.allow[0]", `registry.npmjs.org matches "registry.npmjs.org"`},
		{"REGISTRY.npmjs.ORG", true, "network.allow[0]", ""},
		{"registry.npmjs.org.", true, "network.allow[0]", ""},
		{"proxy.golang.org", true, "network.allow[1]", ""},
		{"a.example.com", true, "network.allow[2]", `matches "*.example.com"`},
		{"a.b.c.example.com", true, "network.allow[2]", ""},
		{"example.com", false, "network.default", "not on the allow list"},
		{"notexample.com", false, "network.default", ""},
		{"example.com.evil.org", false, "network.default", ""},
		{"evil.example.com", false, "network.deny[0]", `matches "evil.example.com"`},
		{"EVIL.example.com.", false, "network.deny[0]", ""},
		{"x.bad.example.com", false, "network.deny[1]", ""},
		{"bad.example.com", true, "network.allow[2]", ""},
		{"bücher.example", true, "network.allow[3]", ""},
		{"xn--bcher-kva.example", true, "network.allow[3]", ""},
		{"BÜCHER.example", true, "network.allow[3]", ""},
		{"bu\u0308cher.example", false, "network", "canonical"}, // the same name, decomposed
		{"10.1.2.3", true, "network.allow[4]", ""},
		{"::ffff:10.1.2.3", true, "network.allow[4]", ""},
		{"2001:db8::1", true, "network.allow[5]", ""},
		{"[2001:db8::1]", true, "network.allow[5]", ""},
		{"10.9.9.9", false, "network.deny[2]", ""},
		{"10.1.2.4", false, "network.default", ""},
		{"127.0.0.1", false, "network.default", ""},
		{"github.com", false, "network.default", ""},

		{"", false, "network", "empty name"},
		{"evil.com\x00.example.com", false, "network", "NUL"},
		{"a b.example.com", false, "network", "space"},
		{"a..example.com", false, "network", "empty label"},
		{".example.com", false, "network", "empty label"},
		{"example.com..", false, "network", "empty label"},
		{"-a.example.com", false, "network", "hyphen"},
		{strings.Repeat("a", 64) + ".example.com", false, "network", "over 63"},
		{strings.Repeat("a.", 127) + "com", false, "network", "over 253"},
		{"a.example.com:443", false, "network", "want a bare host name"},
		{"user@a.example.com", false, "network", "want a bare host name"},
		{"http://a.example.com", false, "network", ""},
		{"*.example.com", false, "network", ""},
		{"127.1", false, "network", "last label is a number"},
		{"0x7f.1", false, "network", "last label is a number"},
		{"2130706433", false, "network", "last label is a number"},
		{"fe80::1%eth0", false, "network", "zone"},
		{"[10.1.2.3]", false, "network", "IPv6"},
		{"xn--zz.example.com", false, "network", "internationalised"},
		{"a\u200b.example.com", false, "network", "canonical"},
		{"a.example\u3002com", false, "network", "canonical"},
	}
	for _, tt := range tests {
		d := p.Host(tt.host)
		if d.Allow != tt.allow || d.Rule != tt.rule || !strings.Contains(d.Reason, tt.want) {
			t.Errorf("Host(%q) = %v; want allow=%v rule %s reason containing %q", tt.host, d, tt.allow, tt.rule, tt.want)
		}
	}
}

func TestHostDefaults(t *testing.T) {
	tests := []struct {
		policy string
		allow  bool
		rule   string
	}{
		{"", false, "network.default"},
		{"network: {default: allow}", true, "network.default"},
		{"network: {default: allow, deny: [example.org]}", true, "network.default"},
		{"network: {allow: [example.org]}", false, "network.default"},
	}
	for _, tt := range tests {
		p := mustLoad(t, tt.policy)
		if d := p.Host("example.com"); d.Allow != tt.allow || d.Rule != tt.rule {
			t.Errorf("%q: Host = %v; want allow=%v rule %s", tt.policy, d, tt.allow, tt.rule)
		}
	}
	p := mustLoad(t, "network: {default: allow, deny: [example.org]}")
	if d := p.Host("example.org"); d.Allow || d.Rule != "network.deny[0]" {
		t.Errorf("Host = %v", d)
	}
}

// network.require_capability is read as a YAML boolean, off unless given, and said in the
// summary; it does not change what Host decides.
func TestRequireCapability(t *testing.T) {
	for policy, want := range map[string]bool{
		"network: {allow: [example.com]}":                            false,
		"network: {allow: [example.com], require_capability: false}": false,
		"network: {allow: [example.com], require_capability: true}":  true,
		"network: {allow: [example.com], require_capability: True}":  true,
	} {
		p := mustLoad(t, policy)
		if got := p.RequiresNetCapability(); got != want {
			t.Errorf("%q: RequiresNetCapability = %v, want %v", policy, got, want)
		}
		if got := strings.Contains(p.Summary(), "capability required"); got != want {
			t.Errorf("%q: summary %q says a capability is required: %v, want %v", policy, p.Summary(), got, want)
		}
		if d := p.Host("example.com"); !d.Allow {
			t.Errorf("%q: Host(example.com) = %v", policy, d)
		}
	}
}
