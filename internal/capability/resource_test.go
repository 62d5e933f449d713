package capability

import (
	"strings"
	"testing"
)

func TestParseResource(t *testing.T) {
	tests := []struct {
		in    string
		grant bool
		want  string // the canonical form, or the error
		ok    bool
	}{
		{"file:/workspace/src", false, "file:/workspace/src", true},
		{"file:/workspace//src/./", true, "file:/workspace/src", true},
		{"file:/", true, "file:/", true},
		{"file://", false, "file:/", true},
		{"file:/a/.../b", false, "file:/a/.../b", true}, // "..." is a name, not a parent
		{"file:/a/..b", false, "file:/a/..b", true},
		{"file:/a/b/..", true, "holds a .. segment", false},
		{"file:/../etc", false, "holds a .. segment", false},
		{"file:a", true, "not an absolute path", false},
		{"file:./a", true, "not an absolute path", false},
		{"file:", true, "has an empty path", false},
		{"file:/a\x00b", true, "holds a NUL byte", false},
		{"exec:node", false, "exec:node", true},
		{"exec:x86_64-linux-gnu-g++", false, "exec:x86_64-linux-gnu-g++", true},
		{"exec:python3.12", false, "exec:python3.12", true},
		{"exec:*", true, "exec:*", true},
		{"exec:*", false, "is a wildcard", false},
		{"exec:no*de", true, "holds '*'", false},
		{"exec:", true, "has no program name", false},
		{"exec:..", true, "is not a program name", false},
		{"exec:bin/sh", true, "holds a /", false},
		{"exec:" + strings.Repeat("a", 256), true, "over 255 bytes", false},
		{"net:Registry.NPMJS.org.", false, "net:registry.npmjs.org", true},
		{"net:*.Example.com", true, "net:*.example.com", true},
		{"net:*.example.com", false, "is a wildcard", false},
		{"net:*", true, "is a bare *", false},
		{"net:*.*.example.com", true, "holds a * that is not the whole first label", false},
		{"net:a*.example.com", true, "holds a * that is not", false},
		{"net:xn--bcher-kva.de", false, "net:xn--bcher-kva.de", true},
		{"net:under_score.example.com", false, "net:under_score.example.com", true},
		{"net:-a.example.com", false, "starts or ends with '-'", false},
		{"net:a..b", false, "has an empty label", false},
		{"net:.", false, "has no host name", false},
		{"net:", false, "has no host name", false},
		{"net:" + strings.Repeat("a", 64) + ".com", false, "label of 64 bytes", false},
		{"net:" + strings.Repeat("a.", 127) + "com", false, "over 253", false},
		{"net:1.2.3.4", false, "net:1.2.3.4", true},
		{"net:1.2.3.0x4", false, "numeric last label", false},
		{"net:01.2.3.4", false, "numeric last label", false},
		{"net:2130706433", false, "numeric last label", false},
		{"net:[2001:DB8::1]", false, "net:[2001:db8::1]", true},
		{"net:2001:db8::1", false, "net:[2001:db8::1]", true},
		{"net:::ffff:127.0.0.1", false, "net:127.0.0.1", true},
		{"net:*.[::1]", true, "puts a wildcard on an address", false},
		{"net:a b", false, `"net:a b" holds ' '`, false},
		{"net:evil.com/x", false, "holds '/'", false},
		{"net:user@evil.com", false, "holds '@'", false},
		{"http://example.com", true, "want file:/absolute/path, exec:program or net:host", false},
		{"FILE:/a", true, "want file:", false},
	}
	for _, tt := range tests {
		r, err := parseResource(tt.in, tt.grant)
		switch {
		case tt.ok && (err != nil || r.String() != tt.want):
			t.Errorf("parseResource(%q, %v) = %q, %v; want %q", tt.in, tt.grant, r, err, tt.want)
		case !tt.ok && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("parseResource(%q, %v) = %q, %v; want an error with %q", tt.in, tt.grant, r, err, tt.want)
		}
	}
}

func TestCovers(t *testing.T) {
	tests := []struct {
		grant, req string
		want       bool
	}{
		{"file:/workspace/src", "file:/workspace/src", true},
		{"file:/workspace/src", "file:/workspace/src/a.ts", true},
		{"file:/workspace/src", "file:/workspace/src/ui/a.ts", true},
		{"file:/workspace/src", "file:/workspace/srcx", false},
		{"file:/workspace/src", "file:/workspace/srcx/a.ts", false},
		{"file:/workspace/src", "file:/workspace", false},
		{"file:/workspace/src", "file:/", false},
		{"file:/", "file:/anything/at/all", true},
		{"file:/workspace/src/ui", "file:/workspace/src", false},
		{"exec:*", "exec:node", true},
		{"exec:node", "exec:node", true},
		{"exec:node", "exec:nodejs", false},
		{"exec:*", "file:/usr/bin/node", false},
		{"net:example.com", "net:example.com", true},
		{"net:example.com", "net:www.example.com", false},
		{"net:*.example.com", "net:www.example.com", true},
		{"net:*.example.com", "net:a.b.example.com", true},
		{"net:*.example.com", "net:example.com", false},
		{"net:*.example.com", "net:wwwexample.com", false},
		{"net:*.example.com", "net:example.com.evil.org", false},
		{"net:*.b.example.com", "net:a.example.com", false},
		{"net:10.0.0.1", "net:10.0.0.1", true},
		{"net:10.0.0.1", "net:10.0.0.10", false},
		{"net:[::1]", "net:[::1]", true},
		{"file:/a", "net:a", false},
	}
	for _, tt := range tests {
		g, err := parseResource(tt.grant, true)
		if err != nil {
			t.Fatal(err)
		}
		r, err := parseResource(tt.req, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := g.covers(r); got != tt.want {
			t.Errorf("%s covers %s = %v, want %v", tt.grant, tt.req, got, tt.want)
		}
	}
}
