package files

import (
	"path"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestResolve(t *testing.T) {
	tests := []struct {
		in, want string
		wantErr  bool
	}{
		{"", ".", false},
		{".", ".", false},
		{"/", ".", false},
		{"///", ".", false},
		{"/workspace", ".", false},
		{"/workspace/", ".", false},
		{"/workspace/src/a.go", "src/a.go", false},
		{"/src/a.go", "src/a.go", false},
		{"src/a.go", "src/a.go", false},
		{"src//./a.go/", "src/a.go", false},
		{"a/../b", "b", false},
		{"a/..", ".", false},
		{"workspace/x", "workspace/x", false},    // relative: a directory named workspace
		{"/workspacex/y", "workspacex/y", false}, // not the mount prefix
		{"/workspace/workspace/x", "workspace/x", false},
		{`a\..\..\b`, `a\..\..\b`, false}, // backslash is an ordinary byte on Linux
		{"..", "", true},
		{"../x", "", true},
		{"/..", "", true},
		{"/../../etc/passwd", "", true},
		{"a/../../x", "", true},
		{"/workspace/../x", "", true},
		{"/workspace/..", "", true},
		{"a\x00b", "", true},
		{"\xff", "", true},
		{strings.Repeat("a", maxPathLen+1), "", true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := resolve(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("resolve(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func FuzzResolve(f *testing.F) {
	for _, seed := range []string{
		"", ".", "/", "..", "../x", "/../../etc/passwd", "a/../../x", "/workspace/../x",
		"/workspace", "/workspace/a", "src/a.go", "a//b/./c/", "a\x00b", "\xff\xfe",
		"....//..", "/./../", "a/b/../../..", `..\x`, "/workspace/./../workspace",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := resolve(in)
		if err != nil {
			return
		}
		switch {
		case path.IsAbs(got):
			t.Fatalf("resolve(%q) = %q: absolute", in, got)
		case got == ".." || strings.HasPrefix(got, "../"):
			t.Fatalf("resolve(%q) = %q: escapes", in, got)
		case !filepath.IsLocal(got):
			t.Fatalf("resolve(%q) = %q: not local", in, got)
		case path.Clean(got) != got:
			t.Fatalf("resolve(%q) = %q: not clean", in, got)
		case strings.IndexByte(got, 0) >= 0 || !utf8.ValidString(got):
			t.Fatalf("resolve(%q) = %q: NUL or invalid UTF-8", in, got)
		}
	})
}
