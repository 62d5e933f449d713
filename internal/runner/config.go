package runner

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

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
	// Tier is the default isolation tier; empty means container (see Runner.DefaultTierReason).
	// "process" is refused here: it needs an explicit --insecure on each run.
	Tier wire.Tier `yaml:"tier"`
	// Runc and Runsc are the OCI runtime binaries. Default: paddock's own install under
	// /usr/local/lib/paddock/bin, then PATH.
	Runc  string `yaml:"runc"`
	Runsc string `yaml:"runsc"`
	// Agent is the paddock-agent binary. Default: next to the paddock binary, then PATH.
	Agent string `yaml:"agent"`
	// HistoryThroughAgent reads and writes sandboxes' history stores (forks, backups,
	// restores) through their agents, as on a cluster, even where the runner could read
	// them on this host: slower, for tests and measurement. A cluster always does.
	HistoryThroughAgent bool `yaml:"history_through_agent"`
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
	Limits wire.Limits `yaml:"limits"`
	// MaxLimits caps what any request may ask for.
	MaxLimits wire.Limits `yaml:"max_limits"`
	// DiskReserve is space on the workspaces' file system that no sandbox may take: a
	// sandbox whose disk, with every other sandbox's disk full, would leave less free is
	// refused (ErrLimitExceeded). It keeps room for the control plane's own data
	// (paddock.db) when that shares the file system. Default: 1GiB or 5% of the file
	// system, whichever is larger.
	DiskReserve wire.Size `yaml:"disk_reserve"`
	// SharedDisk is the size of each user's shared disk: an ext4 image mounted at
	// <workspace_root>/<user>/shared and bound at /shared in each of the user's container
	// sandboxes, holding HOME and the npm, Go and cargo caches. A write past it fails with
	// ENOSPC and the command says the limit was reached. Default: 2GiB. Negative: no
	// shared disk; HOME and the caches stay in each sandbox's /tmp.
	SharedDisk wire.Size `yaml:"shared_disk"`
	// HostPorts are ports of every sandbox's loopback where the host serves (the control
	// plane's services): set by the control plane, not by configuration. Where the tier
	// allows it (container under runc) the host listens there itself, in the sandbox's
	// network namespace (Sandbox.Listener); elsewhere the agent relays them.
	HostPorts []int `yaml:"-"`
	// Cluster says where sandboxes run: this host, or a Kubernetes cluster
	// (runner: {backend: kubernetes, kubeconfig: ..., namespace: ..., image: ...}).
	Cluster ClusterConfig `yaml:"runner"`
}

// UserConfig narrows the global configuration for one user.
type UserConfig struct {
	// Tier, when set, is this user's default tier.
	Tier wire.Tier `yaml:"tier"`
	// Limits override the global default limits, within MaxLimits.
	Limits wire.Limits `yaml:"limits"`
}

// DefaultConfig is the configuration paddock runs with when no file says otherwise.
func DefaultConfig() Config {
	return Config{
		DataDir:    defaultDataDir(),
		StateDir:   "/run/paddock",
		SandboxUID: 1000,
		SandboxGID: 1000,
		Limits:     wire.Limits{Memory: 1 << 30, Pids: 1024, Disk: 4 << 30},
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
	c.fillCluster()
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
	if c.SharedDisk > 0 && c.SharedDisk < 16<<20 {
		return invalidField("shared_disk", "%s is too small for an ext4 disk: give at least 16MiB, or a negative size for none", c.SharedDisk)
	}
	if c.DiskReserve < 0 {
		return invalidField("disk_reserve", "must not be negative")
	}
	if err := c.MaxLimits.Validate("max_limits."); err != nil {
		return err
	}
	return c.validateCluster()
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

func invalidUser(user string) error {
	return invalidField("user", "%q is not a user name", user)
}

func invalidField(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", field, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
}
