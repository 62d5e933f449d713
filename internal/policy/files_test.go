package policy

import (
	"errors"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/errdefs"
)

const filesPolicy = `
files:
  jail: /workspace/
  deny_write: [".git/hooks/**", ".env", "/workspace/secrets/*.key", "build/", "**/node_modules/.bin/*"]
  allowed_extensions: [".ts", ".tsx", ".d.ts", ".css"]
  max_file_size: 1M
`

func TestFile(t *testing.T) {
	p := mustLoad(t, filesPolicy)
	const mb = 1 << 20
	tests := []struct {
		name string
		op   Op
		path string
		size int64
		rule string // "" for allowed by files.jail
		want string
	}{
		{"write a ts file", Write, "src/app.ts", 10, "", ""},
		{"absolute inside", Create, "/workspace/src/app.tsx", 10, "", ""},
		{"dot segments inside", Write, "src/../lib/./x.css", 10, "", ""},
		{"exactly the limit", Write, "a.ts", mb, "", ""},
		{"two-dot extension", Create, "types/x.d.ts", 1, "", ""},
		{"read anything inside", Read, ".env", 0, "", ""},
		{"read the jail", Read, "/workspace", 0, "", ""},
		{"mkdir ignores extensions", Mkdir, "src/components", 0, "", ""},
		{"delete ignores extensions", Delete, "src/old.go", 0, "", ""},

		{"escape with ..", Read, "../etc/passwd", 0, "files.jail", "outside the jail /workspace"},
		{"escape deep", Write, "a/b/../../../x.ts", 1, "files.jail", "resolves to /x.ts"},
		{"absolute outside", Read, "/etc/passwd", 0, "files.jail", "outside"},
		{"sibling with the same prefix", Read, "/workspace2/x.ts", 0, "files.jail", "outside"},
		{"absolute climbing out", Read, "/workspace/../etc", 0, "files.jail", "outside"},
		{"NUL", Read, "a\x00.ts", 0, "files", "NUL byte"},
		{"empty", Read, "", 0, "files", "empty path"},
		{"too long", Read, strings.Repeat("a", MaxPath+1), 0, "files", "over 4096"},
		{"unknown op", Op(0), "a.ts", 0, "files", "unknown operation"},

		{"hook", Write, ".git/hooks/pre-commit", 1, "files.deny_write[0]", `protected by ".git/hooks/**"`},
		{"hook subdirectory", Create, ".git/hooks/a/b.ts", 1, "files.deny_write[0]", ""},
		{"hooks directory itself", Delete, ".git/hooks", 0, "files.deny_write[0]", ""},
		{"parent of hooks", Delete, ".git", 0, "files.deny_write[0]", ""},
		{"mkdir in hooks", Mkdir, ".git/hooks/x", 0, "files.deny_write[0]", ""},
		{"git config is fine", Delete, ".git/config", 0, "", ""},
		{"hooks elsewhere is fine", Delete, "src/.git/hooks", 0, "", ""},
		{".env at the top", Write, ".env", 1, "files.deny_write[1]", ""},
		{".env at any depth", Write, "a/b/.env", 1, "files.deny_write[1]", ""},
		{"inside a .env directory", Write, "a/.env/x.ts", 1, "files.deny_write[1]", ""},
		{".env.local is not .env", Write, ".env.local.ts", 1, "", ""},
		{"absolute pattern", Write, "secrets/a.key", 1, "files.deny_write[2]", ""},
		{"absolute pattern, other file", Write, "secrets/a.ts", 1, "", ""},
		{"trailing slash pattern", Write, "out/build/x.css", 1, "files.deny_write[3]", ""},
		{"double star in the middle", Write, "a/b/node_modules/.bin/x.ts", 1, "files.deny_write[4]", ""},
		{"deny wins over extensions", Write, ".git/hooks/x.ts", 1, "files.deny_write[0]", ""},
		{"writing the jail", Write, "/workspace", 1, "files.jail", "the jail /workspace itself"},
		{"deleting the jail", Delete, ".", 0, "files.jail", "itself"},

		{"extension", Write, "main.go", 1, "files.allowed_extensions", "does not end in .ts, .tsx, .d.ts, .css"},
		{"extension is case-sensitive", Write, "a.TS", 1, "files.allowed_extensions", ""},
		{"no extension", Create, "Makefile", 1, "files.allowed_extensions", ""},
		{"over the limit", Write, "a.ts", mb + 1, "files.max_file_size", "over the limit of 1MiB"},
		{"unknown size", Create, "a.ts", -1, "files.max_file_size", "not known"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := p.File(tt.op, tt.path, tt.size)
			allow, rule := tt.rule == "", tt.rule
			if allow {
				rule = "files.jail"
			}
			if d.Allow != allow || d.Rule != rule || !strings.Contains(d.Reason, tt.want) {
				t.Errorf("File(%s, %q, %d) = %v; want allow=%v rule %s reason containing %q", tt.op, tt.path, tt.size, d, allow, rule, tt.want)
			}
		})
	}
}

func TestFileNoRules(t *testing.T) {
	p := mustLoad(t, "shell: {deny: [x]}\n")
	if d := p.File(Write, "/etc/passwd", 1<<40); !d.Allow || d.Rule != "files" {
		t.Errorf("File = %v", d)
	}
	if d := p.File(Read, "a\x00b", 0); d.Allow {
		t.Errorf("a NUL byte was allowed without file rules: %v", d)
	}
}

func TestFileRootJail(t *testing.T) {
	p := mustLoad(t, "files:\n  jail: /\n  deny_write: [/etc/**]\n")
	if d := p.File(Write, "/etc/passwd", 1); d.Allow || d.Rule != "files.deny_write[0]" {
		t.Errorf("File = %v", d)
	}
	if d := p.File(Write, "tmp/x", 1); !d.Allow {
		t.Errorf("File = %v", d)
	}
	if d := p.File(Delete, "/", 0); d.Allow {
		t.Errorf("deleting / was allowed: %v", d)
	}
}

func TestResolve(t *testing.T) {
	p := mustLoad(t, filesPolicy)
	tests := []struct {
		in, want string
		err      error
	}{
		{"a/b", "/workspace/a/b", nil},
		{"./a//b/", "/workspace/a/b", nil},
		{"/workspace", "/workspace", nil},
		{"..", "", errdefs.ErrPermissionDenied},
		{"/", "", errdefs.ErrPermissionDenied},
		{"a\x00", "", errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		got, err := p.Resolve(tt.in)
		if got != tt.want || !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
			t.Errorf("Resolve(%q) = %q, %v; want %q, %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestOpString(t *testing.T) {
	for op, want := range map[Op]string{Read: "read", Write: "write", Create: "create", Delete: "delete", Mkdir: "mkdir", 9: "op(9)"} {
		if op.String() != want {
			t.Errorf("%d.String() = %q, want %q", op, op.String(), want)
		}
	}
}
