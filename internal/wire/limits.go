package wire

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// The one type of a sandbox's resource limits, shared by the control plane (its
// configuration, policies, the fleet's records), the runner and the tiers. The API keeps
// only its JSON view (api.Limits); cgroups.Limits is what one cgroup is set to.

// Limits are resource limits; a zero field means "not set".
type Limits struct {
	Memory  Size          `yaml:"memory"`
	CPUs    float64       `yaml:"cpus"`
	Pids    int64         `yaml:"pids"`
	Timeout time.Duration `yaml:"timeout"`
	// Tmp, when set, makes the sandbox's /tmp a tmpfs of this size, whose pages count as its
	// memory (so it must be below Memory). Unset: /tmp is on the sandbox's disk (Disk), or,
	// without one, a tmpfs of a quarter of its memory (at most 1GiB).
	Tmp Size `yaml:"tmp"`
	// Disk bounds the sandbox's workspace and /tmp together on disk: a file system image of
	// this size, which the kernel fills no further (ENOSPC inside). A workspace given with
	// --workspace is the user's own directory and is not counted.
	Disk Size `yaml:"disk"`
	// FileSize is the largest file a command in the sandbox may write (RLIMIT_FSIZE, set
	// by the agent on every process it starts, not on itself).
	FileSize Size `yaml:"file_size"`
}

// Size is a byte count written like 512M, 1.5GiB or 1048576.
type Size int64

// UnmarshalYAML reads a size from a scalar.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseSize(n.Value)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// ParseSize reads "128M", "1.5G", "512MiB", "64k" or a plain byte count. Units are binary.
func ParseSize(s string) (Size, error) {
	num := strings.TrimRight(s, "KkMmGgTtiBb")
	unit := strings.ToUpper(strings.TrimSuffix(strings.TrimSuffix(s[len(num):], "B"), "b"))
	shift, ok := map[string]uint{"": 0, "K": 10, "KI": 10, "M": 20, "MI": 20, "G": 30, "GI": 30, "T": 40, "TI": 40}[unit]
	f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if !ok || err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a size (like 512M, 1.5GiB or 1048576): %w", s, errdefs.ErrInvalidArgument)
	}
	v := f * float64(uint64(1)<<shift)
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large: %w", s, errdefs.ErrInvalidArgument)
	}
	return Size(v), nil
}

// String prints a size in the largest binary unit that divides it.
func (s Size) String() string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if s > 0 && s%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", s>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%dB", int64(s))
}

// Validate checks limits and names the field that is wrong.
func (l Limits) Validate(prefix string) error {
	switch {
	case l.Memory < 0:
		return invalidField(prefix+"memory", "must not be negative")
	case l.Memory != 0 && l.Memory < 4<<20:
		return invalidField(prefix+"memory", "%s is below the 4MiB a sandbox needs to start", l.Memory)
	case l.CPUs < 0 || math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0):
		return invalidField(prefix+"cpus", "must be a positive number of CPUs")
	case l.CPUs != 0 && l.CPUs < 0.01:
		return invalidField(prefix+"cpus", "%g is below the smallest quota (0.01)", l.CPUs)
	case l.Pids < 0:
		return invalidField(prefix+"pids", "must not be negative")
	case l.Pids != 0 && l.Pids < 4:
		return invalidField(prefix+"pids", "%d is too few for the agent and a command (at least 4)", l.Pids)
	case l.Timeout < 0:
		return invalidField(prefix+"timeout", "must not be negative")
	case l.Tmp < 0:
		return invalidField(prefix+"tmp", "must not be negative")
	case l.FileSize < 0:
		return invalidField(prefix+"file_size", "must not be negative")
	case l.Disk < 0:
		return invalidField(prefix+"disk", "must not be negative")
	case l.Disk != 0 && l.Disk < MinDisk:
		return invalidField(prefix+"disk", "%s is below the smallest disk (%s)", l.Disk, Size(MinDisk))
	}
	return nil
}

// MinDisk is the smallest disk limit: what an ext4 image needs for its own metadata and a
// small workspace.
const MinDisk = 64 << 20

// CheckTmp refuses a /tmp that would not fit in memory: a tmpfs's pages are the sandbox's
// memory, so filling it would leave commands (and the agent) nothing.
func (l Limits) CheckTmp() error {
	if l.Tmp > 0 && l.Memory > 0 && l.Tmp >= l.Memory {
		return invalidField("tmp", "%s is not below the memory limit (%s): /tmp is a tmpfs whose pages count as memory; ask for less, or leave tmp out to put /tmp on the sandbox's disk", l.Tmp, l.Memory)
	}
	return nil
}

// Over names the first field of l that exceeds max (where max sets one).
func (l Limits) Over(max Limits) error {
	over := func(v, m float64) bool { return m > 0 && (v == 0 || v > m) }
	switch {
	case over(float64(l.Memory), float64(max.Memory)):
		return limitField("memory", "%s is over the maximum %s", l.Memory, max.Memory)
	case over(l.CPUs, max.CPUs):
		return limitField("cpus", "%g is over the maximum %g", l.CPUs, max.CPUs)
	case over(float64(l.Pids), float64(max.Pids)):
		return limitField("pids", "%d is over the maximum %d", l.Pids, max.Pids)
	case over(float64(l.Timeout), float64(max.Timeout)):
		return limitField("timeout", "%s is over the maximum %s", l.Timeout, max.Timeout)
	case over(float64(l.FileSize), float64(max.FileSize)):
		return limitField("file_size", "%s is over the maximum %s", l.FileSize, max.FileSize)
	case over(float64(l.Disk), float64(max.Disk)):
		return limitField("disk", "%s is over the maximum %s", l.Disk, max.Disk)
	}
	return nil
}

// Or fills l's unset fields from d.
func (l Limits) Or(d Limits) Limits {
	if l.Memory == 0 {
		l.Memory = d.Memory
	}
	if l.CPUs == 0 {
		l.CPUs = d.CPUs
	}
	if l.Pids == 0 {
		l.Pids = d.Pids
	}
	if l.Timeout == 0 {
		l.Timeout = d.Timeout
	}
	if l.Tmp == 0 {
		l.Tmp = d.Tmp
	}
	if l.FileSize == 0 {
		l.FileSize = d.FileSize
	}
	if l.Disk == 0 {
		l.Disk = d.Disk
	}
	return l
}

func invalidField(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", field, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
}

func limitField(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", field, fmt.Sprintf(format, args...), errdefs.ErrLimitExceeded)
}

// SandboxPids is the pids limit of the sandbox as a whole: Pids, what the user asked for,
// plus the agent's own threads (0: no limit). The commands are held to Pids, the command
// itself included, by a group of their own under runc and in a microVM's guest, and by
// RLIMIT_NPROC under runsc; in the process tier they share this limit with the agent.
func (l Limits) SandboxPids() int64 {
	if l.Pids == 0 {
		return 0
	}
	return l.Pids + ThreadReserve + 8
}
