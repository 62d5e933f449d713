package wire

import (
	"path"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestResolvePath(t *testing.T) {
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
		{strings.Repeat("a", MaxPathLen+1), "", true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ResolvePath(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("ResolvePath(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func FuzzResolvePath(f *testing.F) {
	for _, seed := range []string{
		"", ".", "/", "..", "../x", "/../../etc/passwd", "a/../../x", "/workspace/../x",
		"/workspace", "/workspace/a", "src/a.go", "a//b/./c/", "a\x00b", "\xff\xfe",
		"....//..", "/./../", "a/b/../../..", `..\x`, "/workspace/./../workspace",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ResolvePath(in)
		if err != nil {
			return
		}
		switch {
		case path.IsAbs(got):
			t.Fatalf("ResolvePath(%q) = %q: absolute", in, got)
		case got == ".." || strings.HasPrefix(got, "../"):
			t.Fatalf("ResolvePath(%q) = %q: escapes", in, got)
		case !filepath.IsLocal(got):
			t.Fatalf("ResolvePath(%q) = %q: not local", in, got)
		case path.Clean(got) != got:
			t.Fatalf("ResolvePath(%q) = %q: not clean", in, got)
		case strings.IndexByte(got, 0) >= 0 || !utf8.ValidString(got):
			t.Fatalf("ResolvePath(%q) = %q: NUL or invalid UTF-8", in, got)
		}
	})
}
