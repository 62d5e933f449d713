package microvm_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/sandbox/microvm"
	"github.com/paddockhq/paddock/internal/testenv"
)

func TestCheckAgent(t *testing.T) {
	script := filepath.Join(t.TempDir(), "agent.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, want string
	}{
		{"static agent", testenv.Binary(t, "paddock-agent"), ""},
		{"dynamic binary", "/bin/true", "dynamically linked"},
		{"script", script, "not an ELF executable"},
		{"missing", filepath.Join(t.TempDir(), "none"), "not an ELF executable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := microvm.CheckAgent(tc.path)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("CheckAgent(%s) = %v, want nil", tc.path, err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "make build") {
				t.Fatalf("CheckAgent(%s) = %v, want ErrFailedPrecondition saying %q and to run make build", tc.path, err, tc.want)
			}
		})
	}
}
