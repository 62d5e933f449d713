package wire

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want Size
		ok   bool
	}{
		{"1048576", 1 << 20, true}, {"128M", 128 << 20, true}, {"128MiB", 128 << 20, true}, {"128mb", 128 << 20, true},
		{"1.5G", 3 << 29, true}, {"64k", 64 << 10, true}, {"2T", 2 << 40, true}, {"0", 0, true},
		{"100MB", 100 << 20, true}, {"512k", 512 << 10, true}, {"1GiB", 1 << 30, true},
		{"", 0, false}, {"M", 0, false}, {"1X", 0, false}, {"NaN", 0, false}, {"10PB", 0, false}, {"lots", 0, false}, {"-1M", 0, false}, {"12Q", 0, false}, {"1e400", 0, false}, {"NaNM", 0, false}, {"99999999T", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
		if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ParseSize(%q) error %v is not invalid argument", tt.in, err)
		}
	}
	if s := Size(128 << 20).String(); s != "128MiB" {
		t.Errorf("String = %s", s)
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"128M", "1.5GiB", "0", "-1", "1e3k"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := ParseSize(s); err == nil && v < 0 {
			t.Fatalf("ParseSize(%q) = %d", s, v)
		}
	})
}

func TestLimitsValidate(t *testing.T) {
	bad := []struct {
		l     Limits
		field string
	}{
		{Limits{Memory: -1}, "memory"}, {Limits{Memory: 1 << 10}, "memory"}, {Limits{CPUs: -1}, "cpus"},
		{Limits{CPUs: 0.001}, "cpus"}, {Limits{Pids: 2}, "pids"}, {Limits{Timeout: -time.Second}, "timeout"}, {Limits{Tmp: -1}, "tmp"},
		{Limits{FileSize: -1}, "file_size"}, {Limits{Disk: -1}, "disk"}, {Limits{Disk: 1 << 20}, "disk"},
	}
	for _, tt := range bad {
		err := tt.l.Validate("--")
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "--"+tt.field) {
			t.Errorf("Validate(%+v) = %v, want an error naming --%s", tt.l, err, tt.field)
		}
	}
	max := Limits{Memory: 1 << 30, Pids: 100}
	if err := (Limits{Memory: 2 << 30, Pids: 10}).Over(max); !errors.Is(err, errdefs.ErrLimitExceeded) || !strings.HasPrefix(err.Error(), "memory") {
		t.Errorf("Over = %v", err)
	}
	if err := (Limits{Memory: 1 << 30}).Over(max); err == nil || !strings.HasPrefix(err.Error(), "pids") {
		t.Errorf("unset pids under a max must count as over: %v", err)
	}
	if err := (Limits{Memory: 1 << 30, Pids: 10}).Over(Limits{FileSize: 1 << 20}); err == nil || !strings.HasPrefix(err.Error(), "file_size") {
		t.Errorf("no file size limit under a max must count as over: %v", err)
	}
	got := Limits{CPUs: 2}.Or(Limits{CPUs: 1, Memory: 5 << 20, FileSize: 1 << 20})
	if got.CPUs != 2 || got.Memory != 5<<20 || got.FileSize != 1<<20 {
		t.Errorf("Or = %+v", got)
	}
}

// SandboxPids leaves the agent room above the commands' limit, and no limit stays none.
func TestSandboxPids(t *testing.T) {
	if got := (Limits{}).SandboxPids(); got != 0 {
		t.Errorf("no pids limit: SandboxPids = %d, want 0", got)
	}
	if got := (Limits{Pids: 16}).SandboxPids(); got <= 16+ThreadReserve {
		t.Errorf("SandboxPids of 16 = %d, want more than 16 and the agent's %d threads", got, ThreadReserve)
	}
}
