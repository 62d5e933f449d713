package coder

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

func newToolbox(t *testing.T) *toolbox {
	t.Helper()
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	tb := &toolbox{dir: dir, root: root}
	tb.undo = (&Agent{tools: tb}).undo
	return tb
}

func args(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// The embedded tool descriptions parse, each has a schema, and each is implemented.
func TestToolsDescribed(t *testing.T) {
	tb := newToolbox(t)
	for _, tool := range Tools() {
		var schema map[string]any
		if err := json.Unmarshal(tool.Parameters, &schema); err != nil || schema["type"] != "object" || tool.Description == "" {
			t.Errorf("%s: schema %s, description %q", tool.Name, tool.Parameters, tool.Description)
		}
		_, err := tb.call(context.Background(), tool.Name, `{"no_such_parameter": 1}`)
		if err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("%s: %v, want its arguments checked", tool.Name, err)
		}
	}
	if !strings.Contains(systemPrompt, "workspace") {
		t.Error("the system prompt is not embedded")
	}
}

// The file tools keep to the workspace, through .. and through symbolic links.
func TestToolsStayInWorkspace(t *testing.T) {
	tb := newToolbox(t)
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("s3cret"), 0o644)
	os.Symlink(outside, filepath.Join(tb.dir, "link"))
	for _, tc := range []struct{ tool, args, want string }{
		{"read_file", args(map[string]any{"path": "../secret"}), "leaves the workspace"},
		{"read_file", args(map[string]any{"path": filepath.Join(outside, "secret")}), "outside the workspace"},
		{"read_file", args(map[string]any{"path": "link/secret"}), "outside the workspace"},
		{"write_file", args(map[string]any{"path": "link/new", "content": "x"}), "outside the workspace"},
		{"list_files", args(map[string]any{"path": "link"}), "outside the workspace"},
		{"search_files", args(map[string]any{"pattern": "s3cret", "path": "link"}), "outside the workspace"},
	} {
		out, err := tb.call(context.Background(), tc.tool, tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(out+err.Error(), "s3cret") {
			t.Errorf("%s %s: %q, %v; want %q", tc.tool, tc.args, out, err, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "new")); err == nil {
		t.Error("write_file wrote through the link")
	}
}

func TestFileTools(t *testing.T) {
	tb := newToolbox(t)
	ctx := context.Background()
	steps := []struct{ tool, args, want string }{
		{"write_file", args(map[string]any{"path": "src/a.txt", "content": "one\ntwo\ntwo\nthree\n"}), "wrote src/a.txt (18 bytes)"},
		{"read_file", args(map[string]any{"path": "src/a.txt", "offset": 2, "limit": 2}), "two\ntwo\n[src/a.txt continues after line 3: read again with offset 4]"},
		{"edit_file", args(map[string]any{"path": "src/a.txt", "old_string": "two", "new_string": "2"}), "error: old_string occurs 2 times"},
		{"edit_file", args(map[string]any{"path": "src/a.txt", "old_string": "four", "new_string": "4"}), "error: old_string does not occur"},
		{"edit_file", args(map[string]any{"path": "src/a.txt", "old_string": "two", "new_string": "2", "replace_all": true}), "edited src/a.txt: replaced 2"},
		{"read_file", args(map[string]any{"path": "src/a.txt"}), "one\n2\n2\nthree\n"},
		{"list_files", "{}", "src/\nsrc/a.txt"},
		{"search_files", args(map[string]any{"pattern": "^th"}), "src/a.txt:4: three"},
		{"search_files", args(map[string]any{"pattern": "("}), "error: pattern is not a regular expression"},
		{"read_file", args(map[string]any{"path": "nope"}), "error: nope does not exist"},
		{"read_file", args(map[string]any{"path": "src"}), "error: src is a directory"},
	}
	for _, st := range steps {
		out, err := tb.call(ctx, st.tool, st.args)
		if err != nil {
			out = "error: " + err.Error()
		}
		if !strings.HasPrefix(out, st.want) {
			t.Errorf("%s %s:\n got %q\nwant %q…", st.tool, st.args, out, st.want)
		}
	}
}

// run_command says its exit status and which limit stopped it.
func TestRunCommand(t *testing.T) {
	tb := newToolbox(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name, command string
		timeout       int
		want          []string
	}{
		{"exit status", "echo out; echo err >&2; exit 3", 0, []string{"exit status 3\n", "out\n", "err\n"}},
		{"timeout", "echo started; sleep 60 & sleep 60", 1, []string{"limit hit: timeout: the command ran for 1s", "started"}},
		{"output bound", "yes x | head -c 1000000; echo; echo the-end", 0, []string{"exit status 0", "limit hit: output:", "output left out", "the-end"}},
		{"signal", "kill -9 $$", 0, []string{"killed by signal killed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			out, err := tb.call(ctx, "run_command", args(map[string]any{"command": tc.command, "timeout_seconds": tc.timeout}))
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, errdefs.Clip(out, 2000))
				}
			}
			if len(out) > maxOutputKept+1024 {
				t.Errorf("output is %d bytes", len(out))
			}
			if tc.name == "timeout" && time.Since(start) > 30*time.Second {
				t.Errorf("the timeout did not end the command's children: %s", time.Since(start))
			}
		})
	}
	if _, err := tb.call(ctx, "run_command", `{"command":"true","timeout_seconds":9999}`); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a timeout past the bound: %v", err)
	}
}

func TestHostToolsOutsideSandbox(t *testing.T) {
	tb := newToolbox(t)
	for _, name := range []string{"app_status", "restart_app", "undo"} {
		if _, err := tb.call(context.Background(), name, ""); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), servicesEnv) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
