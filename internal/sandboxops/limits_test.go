package sandboxops

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
)

func TestLimitHit(t *testing.T) {
	l := wire.Limits{Memory: 256 << 20, Pids: 64, FileSize: 1 << 20}
	zero := limitCounts{oomKnown: true, forksKnown: true}
	counts := func(oom, forks uint64) limitCounts {
		return limitCounts{oom: oom, forks: forks, oomKnown: true, forksKnown: true}
	}
	tests := []struct {
		name          string
		end           commandEnd
		before, after limitCounts
		l             wire.Limits
		limit, msg    string
	}{
		{"nothing", commandEnd{}, zero, counts(0, 0), l, "", ""},
		{"timeout", commandEnd{signal: 9, timedOut: true, timeout: "the policy's timeout (2s)"}, zero, counts(1, 0), l,
			api.LimitTimeout, "the policy's timeout (2s) was hit: the command was killed"},
		{"file size", commandEnd{signal: int(syscall.SIGXFSZ)}, zero, counts(0, 0), l,
			api.LimitFileSize, "the sandbox's file size limit (1MiB) was hit: the command was ended by SIGXFSZ"},
		{"file size set by the command itself", commandEnd{signal: int(syscall.SIGXFSZ)}, zero, zero, wire.Limits{},
			api.LimitFileSize, "the sandbox's file size limit was hit: the command was ended by SIGXFSZ"},
		{"one OOM kill", commandEnd{signal: 9}, counts(3, 0), counts(4, 0), l,
			api.LimitMemory, "the sandbox's memory limit (256MiB) was hit: a process was killed"},
		{"OOM kills of a command that carried on", commandEnd{}, counts(3, 0), counts(5, 0), l,
			api.LimitMemory, "the sandbox's memory limit (256MiB) was hit: 2 processes were killed"},
		{"refused forks", commandEnd{}, counts(0, 7), counts(0, 19), l,
			api.LimitPids, "the sandbox's process limit (64) was hit: 12 forks were refused"},
		{"memory before pids", commandEnd{signal: 9}, zero, counts(1, 1), l,
			api.LimitMemory, "the sandbox's memory limit (256MiB) was hit: a process was killed"},
		{"counts not known before", commandEnd{signal: 9}, limitCounts{}, counts(1, 1), l, "", ""},
		{"counts not known after", commandEnd{signal: 9}, zero, limitCounts{}, l, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			limit, msg := limitHit(tt.end, tt.before, tt.after, tt.l)
			if limit != tt.limit || msg != tt.msg {
				t.Errorf("limitHit = %q, %q; want %q, %q", limit, msg, tt.limit, tt.msg)
			}
		})
	}
}

// A create request under a policy gets the policy's tmp and file size when it gives none,
// and is refused, naming both, when it asks for more.
func TestPolicyLimitsSizes(t *testing.T) {
	r := wire.Limits{Tmp: 64 << 20, FileSize: 1 << 20}
	var l api.Limits
	if err := PolicyLimits(&l, r); err != nil || l.Tmp != "64MiB" || l.FileSize != "1MiB" {
		t.Errorf("policyLimits of an empty request: %+v, %v", l, err)
	}
	l = api.Limits{Tmp: "32M", FileSize: "512k"}
	if err := PolicyLimits(&l, r); err != nil || l.Tmp != "32M" || l.FileSize != "512k" {
		t.Errorf("policyLimits of a request within the policy: %+v, %v", l, err)
	}
	l = api.Limits{FileSize: "2M"}
	err := PolicyLimits(&l, r)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "limits.file_size: 2MiB is over the policy's resources.file_size of 1MiB") {
		t.Errorf("policyLimits of a request over the policy: %v", err)
	}
	err = WithinMax(r, wire.Limits{Tmp: 32 << 20})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "resources.tmp: 64MiB is over the server's maximum (max_limits.tmp) of 32MiB") {
		t.Errorf("withinMax of tmp over the max: %v", err)
	}
	err = WithinMax(r, wire.Limits{FileSize: 512 << 10})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "resources.file_size: 1MiB is over the server's maximum (max_limits.file_size) of 512KiB") {
		t.Errorf("withinMax of file_size over the max: %v", err)
	}
}
