package runner

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
)

// Config is the runner's global configuration, read from one YAML file; per-user files
// (UserConfig) may narrow it. Every field has a working default, so no file is needed.
type Config struct {
	// DataDir holds paddock's persistent state; workspaces live under it by default.
	DataDir string `yaml:"data_dir"`
	// StateDir holds per-sandbox runtime state (bundles, sockets, the OCI runtime's own
	// state); it should be on tmpfs. Default: /run/paddock.
	StateDir string `yaml:"state_dir"`
	// WorkspaceRoot is where users' workspaces are provisioned:
	// <workspace_root>/<user>/{shared,tmp,sandboxes,history,vault}. Default: <data_dir>/workspaces.
	WorkspaceRoot string `yaml:"workspace_root"`
	// UsersDir holds per-user configuration files, <users_dir>/<user>.yaml.
	// Default: <data_dir>/users.
	UsersDir string `yaml:"users_dir"`
	// Tier is the default isolation tier; empty means the strongest that works on this host.
	// "process" is refused here: it needs an explicit --insecure on each run.
	Tier wire.Tier `yaml:"tier"`
	// Runc and Runsc are the OCI runtime binaries. Default: paddock's own install under
	// /usr/local/lib/paddock/bin, then PATH.
	Runc  string `yaml:"runc"`
	Runsc string `yaml:"runsc"`
	// Agent is the paddock-agent binary. Default: next to the paddock binary, then PATH.
	Agent string `yaml:"agent"`
	// SandboxUID and SandboxGID are the user that commands run as inside containers
	// (default 1000). A workspace owned by another non-root user runs as that user instead,
	// so its files stay theirs.
	SandboxUID uint32 `yaml:"sandbox_uid"`
	SandboxGID uint32 `yaml:"sandbox_gid"`
	// UserNamespace gives every runc sandbox a user namespace of its own (default true):
	// its root, the agent, is then an unprivileged id on the host (container.AgentHostID)
	// instead of the host's root. false is for hosts whose kernel refuses user namespaces.
	UserNamespace *bool `yaml:"user_namespace"`
	// Limits are the default resource limits of a sandbox.
	Limits Limits `yaml:"limits"`
	// MaxLimits caps what any request may ask for.
	MaxLimits Limits `yaml:"max_limits"`
	// DiskReserve is space on the workspaces' file system that no sandbox may take: a
	// sandbox whose disk, with every other sandbox's disk full, would leave less free is
	// refused (ErrLimitExceeded). It keeps room for the control plane's own data
	// (paddock.db) when that shares the file system. Default: 1GiB or 5% of the file
	// system, whichever is larger.
	DiskReserve Size `yaml:"disk_reserve"`
	// HostPorts are ports of every sandbox's loopback where the host serves (the control
	// plane's services): set by the control plane, not by configuration. Where the tier
	// allows it (container under runc) the host listens there itself, in the sandbox's
	// network namespace (Sandbox.Listener); elsewhere the agent relays them.
	HostPorts []int `yaml:"-"`
}

// UserConfig narrows the global configuration for one user.
type UserConfig struct {
	// Tier, when set, is this user's default tier.
	Tier wire.Tier `yaml:"tier"`
	// Limits override the global default limits, within MaxLimits.
	Limits Limits `yaml:"limits"`
}

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
		return 0, fmt.Errorf("%q is not a size (like 512M, 1.5G or 1048576): %w", s, errdefs.ErrInvalidArgument)
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

// checkTmp refuses a /tmp that would not fit in memory: a tmpfs's pages are the sandbox's
// memory, so filling it would leave commands (and the agent) nothing.
func (l Limits) checkTmp() error {
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

// DefaultConfig is the configuration paddock runs with when no file says otherwise.
func DefaultConfig() Config {
	return Config{
		DataDir:    defaultDataDir(),
		StateDir:   "/run/paddock",
		SandboxUID: 1000,
		SandboxGID: 1000,
		Limits:     Limits{Memory: 1 << 30, Pids: 1024, Disk: 4 << 30},
	}
}

func defaultDataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "paddock")
	}
	if os.Geteuid() == 0 {
		return "/var/lib/paddock"
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "share", "paddock")
}

// LoadConfig reads the global configuration from path over the defaults; an empty path
// means the defaults alone.
func LoadConfig(path string) (Config, error) {
	cfg := DefaultConfig()
	if path != "" {
		if err := decodeFile(path, &cfg); err != nil {
			return Config{}, err
		}
	}
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", configName(path), err)
	}
	return cfg, nil
}

// LoadConfigFrom completes and validates a configuration built in code.
func LoadConfigFrom(cfg Config) (Config, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

func configName(path string) string {
	if path == "" {
		return "default configuration"
	}
	return path
}

func (c *Config) fill() {
	if c.WorkspaceRoot == "" {
		c.WorkspaceRoot = filepath.Join(c.DataDir, "workspaces")
	}
	if c.UsersDir == "" {
		c.UsersDir = filepath.Join(c.DataDir, "users")
	}
}

// Validate checks the configuration and names the field that is wrong.
func (c *Config) Validate() error {
	for field, p := range map[string]string{"data_dir": c.DataDir, "state_dir": c.StateDir, "workspace_root": c.WorkspaceRoot, "users_dir": c.UsersDir} {
		if !filepath.IsAbs(p) {
			return invalidField(field, "%q is not an absolute path", p)
		}
	}
	if c.Tier == wire.TierProcess {
		return invalidField("tier", "the process tier is insecure and cannot be a default; pass --tier process --insecure per run")
	}
	if c.Tier != "" && !c.Tier.Valid() {
		return invalidField("tier", "%q is not microvm, container or process", c.Tier)
	}
	if c.SandboxUID == 0 || c.SandboxGID == 0 {
		return invalidField("sandbox_uid", "sandboxes never run as root (uid and gid must not be 0)")
	}
	if err := c.Limits.Validate("limits."); err != nil {
		return err
	}
	if c.DiskReserve < 0 {
		return invalidField("disk_reserve", "must not be negative")
	}
	return c.MaxLimits.Validate("max_limits.")
}

// LoadUser reads a user's configuration file, if there is one.
func (c *Config) LoadUser(user string) (UserConfig, error) {
	var uc UserConfig
	if !validUser(user) {
		return uc, invalidField("user", "%q is not a user name (letters, digits, '.', '_', '-'; at most 64)", user)
	}
	path := filepath.Join(c.UsersDir, user+".yaml")
	if err := decodeFile(path, &uc); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return UserConfig{}, nil
		}
		return uc, err
	}
	if uc.Tier == wire.TierProcess || (uc.Tier != "" && !uc.Tier.Valid()) {
		return uc, fmt.Errorf("%s: %w", path, invalidField("tier", "%q cannot be a default tier", uc.Tier))
	}
	if err := uc.Limits.Validate("limits."); err != nil {
		return uc, fmt.Errorf("%s: %w", path, err)
	}
	return uc, nil
}

func validUser(u string) bool {
	if u == "" || len(u) > 64 || u[0] == '.' {
		return false
	}
	return strings.Trim(u, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == ""
}

// decodeFile strictly decodes a YAML file: unknown fields are errors that name the line.
func decodeFile(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: %v: %w", path, err, errdefs.ErrInvalidArgument)
	}
	return nil
}

// UserNS says whether runc sandboxes get a user namespace (UserNamespace, default true).
func (c Config) UserNS() bool { return c.UserNamespace == nil || *c.UserNamespace }
