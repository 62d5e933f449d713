//go:build linux

package harden

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/errdefs"
)

func TestConfigValidate(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rootLink := filepath.Join(dir, "root")
	if err := os.Symlink("/", rootLink); err != nil {
		t.Fatal(err)
	}
	valid := Config{Workspace: dir, TempDir: dir, ReadOnly: []string{"/usr", "/does/not/exist"}, AllowConnectTCP: []uint16{443}}

	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr string // the field the error must name; "" for valid
	}{
		{"valid", func(*Config) {}, ""},
		{"no temp dir", func(c *Config) { c.TempDir = "" }, ""},
		{"no workspace", func(c *Config) { c.Workspace = "" }, "Config.Workspace"},
		{"relative workspace", func(c *Config) { c.Workspace = "work" }, "Config.Workspace"},
		{"workspace is a file", func(c *Config) { c.Workspace = file }, "Config.Workspace"},
		{"workspace missing", func(c *Config) { c.Workspace = filepath.Join(dir, "gone") }, "Config.Workspace"},
		{"workspace is root", func(c *Config) { c.Workspace = "/" }, "Config.Workspace"},
		{"temp dir missing", func(c *Config) { c.TempDir = filepath.Join(dir, "gone") }, "Config.TempDir"},
		{"read-only root", func(c *Config) { c.ReadOnly = []string{"/usr", "/"} }, "Config.ReadOnly"},
		{"read-only root spelled oddly", func(c *Config) { c.ReadOnly = []string{"/usr/.."} }, "Config.ReadOnly"},
		{"read-only symlink to root", func(c *Config) { c.ReadOnly = []string{rootLink} }, "Config.ReadOnly"},
		{"relative read-only", func(c *Config) { c.ReadOnly = []string{"usr"} }, "Config.ReadOnly"},
		{"read-write file is root", func(c *Config) { c.ReadWriteFiles = []string{"/"} }, "Config.ReadWriteFiles"},
		{"port 0", func(c *Config) { c.AllowConnectTCP = []uint16{0} }, "Config.AllowConnectTCP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid
			tt.edit(&c)
			err := c.validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got %v, want an invalid-argument error naming %s", err, tt.wantErr)
			}
		})
	}
}

// TestLandlockMissing covers the path this kernel cannot take: no Landlock at all.
func TestLandlockMissing(t *testing.T) {
	o := landlockMissing(false)
	if o.Status != StatusUnsupported || o.err != nil {
		t.Errorf("best effort: got %+v, want unsupported without error", o)
	}
	o = landlockMissing(true)
	if o.Status != StatusFailed || !errors.Is(o.err, errdefs.ErrUnavailable) {
		t.Errorf("required: got %+v, want failed with ErrUnavailable", o)
	}
}

// TestWantDenied checks that a self-check whose forbidden access succeeded, or failed for
// another reason, is a failure: a silently degraded layer must never read as ok.
func TestWantDenied(t *testing.T) {
	if err := wantDenied("x", unix.EACCES, &os.PathError{Op: "open", Path: "/", Err: unix.EACCES}); err != nil {
		t.Errorf("denied as expected: got %v", err)
	}
	if err := wantDenied("x", unix.EACCES, nil); err == nil || !strings.Contains(err.Error(), "not in effect") {
		t.Errorf("allowed: got %v, want an error saying the rule is not in effect", err)
	}
	if err := wantDenied("x", unix.EACCES, unix.ENOENT); err == nil {
		t.Error("other error: got nil, want an error")
	}
	o := stepFailed("landlock_fs", wantDenied("x", unix.EACCES, nil))
	if o.Status != StatusFailed || !errors.Is(o.err, errdefs.ErrFailedPrecondition) {
		t.Errorf("got %+v, want failed with ErrFailedPrecondition", o)
	}
}
