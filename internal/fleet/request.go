package fleet

import (
	"fmt"
	"path"
	"strings"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/wire"
)

// Bounds on what a request may ask for.
const (
	maxNameLen  = 63
	maxArgs     = 256
	maxArgBytes = 64 << 10
	maxEnv      = 256
)

// newRecord checks a create request and turns it into a record. Every error names the
// field that is wrong.
func (f *Fleet) newRecord(c Caller, req api.CreateSandboxRequest) (store.Sandbox, error) {
	id := runner.NewID()
	now := f.now()
	rec := store.Sandbox{
		ID: id, UserID: c.UserID, Username: c.Username, Name: req.Name, State: api.StateCreating,
		Tier: req.Tier, Runtime: req.Runtime, Env: req.Env, CreatedAt: now, UpdatedAt: now,
		Replica: f.cfg.Replica, // the replica that makes a sandbox runs it
	}
	if rec.Name == "" {
		rec.Name = id
	}
	if err := checkName(rec.Name); err != nil {
		return rec, err
	}
	if rec.Tier == "" {
		rec.Tier = string(f.cfg.Tier)
	}
	if rec.Tier == "" {
		rec.Tier = string(wire.TierContainer)
	}
	switch wire.Tier(rec.Tier) {
	case wire.TierContainer, wire.TierMicroVM:
	case wire.TierProcess:
		return rec, invalid("tier", "the process tier is insecure (a host process without namespaces) and is not offered by the control plane")
	default:
		return rec, invalid("tier", "%q is not container or microvm", rec.Tier)
	}
	if rec.Runtime == "" {
		rec.Runtime = f.cfg.Runtime
	}
	if rec.Runtime != "" && rec.Runtime != "runc" && rec.Runtime != "runsc" {
		return rec, invalid("runtime", "%q is not runc or runsc", rec.Runtime)
	}
	if err := limits(&rec, req.Limits, f.cfg.Memory); err != nil {
		return rec, err
	}
	app, err := f.appOf(req.App)
	if err != nil {
		return rec, err
	}
	rec.App = app
	for i, kv := range rec.Env {
		if i >= maxEnv {
			return rec, invalid("env", "more than %d entries", maxEnv)
		}
		if !wire.ValidEnvEntry(kv) {
			return rec, invalid("env", "entry %d: want NAME=VALUE", i)
		}
	}
	return rec, nil
}

func limits(rec *store.Sandbox, l api.Limits, defaultMemory wire.Size) error {
	mem := defaultMemory
	if l.Memory != "" {
		m, err := wire.ParseSize(l.Memory)
		if err != nil || m <= 0 {
			return invalid("limits.memory", "%q is not a size like 512M or 2GiB", l.Memory)
		}
		mem = m
	}
	if l.MemoryBytes != 0 {
		return invalid("limits.memory_bytes", "is read-only; give limits.memory as a size like 512M")
	}
	if l.CPUs < 0 || l.CPUs > 1024 {
		return invalid("limits.cpus", "%g is not between 0 and 1024", l.CPUs)
	}
	if l.Pids < 0 {
		return invalid("limits.pids", "%d is negative", l.Pids)
	}
	if l.TmpBytes != 0 || l.FileSizeBytes != 0 || l.DiskBytes != 0 {
		return invalid("limits", "tmp_bytes, file_size_bytes and disk_bytes are read-only; give limits.tmp, limits.file_size and limits.disk as sizes like 64M")
	}
	tmp, err := optionalSize("limits.tmp", l.Tmp)
	if err != nil {
		return err
	}
	fsize, err := optionalSize("limits.file_size", l.FileSize)
	if err != nil {
		return err
	}
	disk, err := optionalSize("limits.disk", l.Disk)
	if err != nil {
		return err
	}
	rec.MemoryBytes, rec.CPUs, rec.Pids, rec.TmpBytes, rec.FileSizeBytes = int64(mem), l.CPUs, l.Pids, int64(tmp), int64(fsize)
	rec.DiskBytes = int64(disk)
	return limitsOf(*rec).Validate("limits.")
}

// optionalSize reads a size a request may leave out ("" is 0, not set); one it gives
// must be positive.
func optionalSize(field, s string) (wire.Size, error) {
	if s == "" {
		return 0, nil
	}
	v, err := wire.ParseSize(s)
	if err != nil || v <= 0 {
		return 0, invalid(field, "%q is not a size like 64M or 1GiB", s)
	}
	return v, nil
}

// appOf is the app a request asks for, checked; no command is the server's default.
func (f *Fleet) appOf(t api.Template) (store.App, error) {
	app := store.App{Command: t.Command, Port: t.Port, Build: t.Build, Dir: t.Dir, HotReload: t.HotReload, Provider: t.Provider}
	if len(app.Command) == 0 {
		if app.Port != 0 || app.Dir != "" || app.HotReload || app.Provider != "" {
			return app, invalid("app.port", "a port, dir, hot_reload or provider needs a command that serves on it")
		}
		app = f.cfg.App
	}
	return app, checkApp(app)
}

func checkApp(a store.App) error {
	if len(a.Command) > maxArgs {
		return invalid("app.command", "more than %d arguments", maxArgs)
	}
	n := 0
	for i, arg := range a.Command {
		n += len(arg)
		if strings.IndexByte(arg, 0) >= 0 {
			return invalid("app.command", "argument %d contains a NUL byte", i)
		}
	}
	if n > maxArgBytes {
		return invalid("app.command", "longer than %d bytes", maxArgBytes)
	}
	if a.Command[0] == "" {
		return invalid("app.command", "the program name is empty")
	}
	if a.Port < 1 || a.Port > 65535 {
		return invalid("app.port", "%d is not a TCP port (1-65535)", a.Port)
	}
	if a.Port == wire.DesktopPort {
		return invalid("app.port", "%d is the sandbox's desktop, served by paddock; pick another port", a.Port)
	}
	if d := path.Clean(a.Dir); a.Dir != "" && (path.IsAbs(a.Dir) || d == ".." || strings.HasPrefix(d, "../") || strings.ContainsAny(a.Dir, "\x00\n")) {
		return invalid("app.dir", "%q is not a directory inside the workspace, like \"site\"", a.Dir)
	}
	if len(a.Build) > 128 || strings.ContainsFunc(a.Build, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		return invalid("app.build", "want at most 128 printable ASCII characters without spaces")
	}
	return nil
}

// checkName allows names that read well in a URL and a shell: a-z, 0-9 and inner '-'.
func checkName(name string) error {
	if len(name) > maxNameLen {
		return invalid("name", "longer than %d characters", maxNameLen)
	}
	if strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" || name[0] == '-' || name[len(name)-1] == '-' {
		return invalid("name", "%q: use a-z, 0-9 and '-' (not first or last)", name)
	}
	return nil
}

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", field, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
}

// runnerUser is the runner's name for a user: their username, lower-cased (usernames are
// unique ignoring ASCII case, and the runner's per-user directories are case-sensitive).
func runnerUser(username string) string { return strings.ToLower(username) }
