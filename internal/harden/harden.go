//go:build linux

package harden

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Config says what the confined process may still touch. Paths must be absolute.
type Config struct {
	// Workspace is the directory the sandbox works in, granted read-write. Required.
	Workspace string
	// TempDir is the sandbox's private temporary directory on the host, granted read-write.
	// Empty means none.
	TempDir string
	// ReadOnly lists directories or files granted read and execute, e.g. /usr /bin /sbin /lib
	// /lib64 /etc. Paths that do not exist are skipped and named in the report. /proc is
	// deliberately not in the example: without it /dev/fd and tools that read /proc fail, with
	// it the sandbox sees every host process.
	ReadOnly []string
	// ReadWriteFiles lists single files granted read, write and device ioctls, e.g. /dev/null
	// /dev/zero /dev/full /dev/random /dev/urandom /dev/tty. Missing ones are skipped.
	ReadWriteFiles []string
	// AllowConnectTCP lists the TCP ports the sandbox may connect to (any address). Empty
	// denies every TCP connect. TCP bind is always denied, and so is all UDP on kernels whose
	// Landlock can (ABI 10+); below that UDP is open.
	AllowConnectTCP []uint16
	// Rlimits caps per-process resources; RLIMIT_CORE is always 0.
	Rlimits Rlimits
	// RequireLandlock makes a kernel without Landlock an error instead of a reported
	// "unsupported", and enforces Landlock without best-effort downgrading.
	RequireLandlock bool
}

// Rlimits holds the resource limits Apply sets, soft and hard. Zero leaves a limit unchanged.
type Rlimits struct {
	// NoFile caps the number of open file descriptors (RLIMIT_NOFILE).
	NoFile uint64
	// FileSize caps, in bytes, the size of any file the sandbox writes (RLIMIT_FSIZE).
	FileSize uint64
}

// Status is the outcome of one hardening step.
type Status string

const (
	// StatusOK means the step was applied and checked.
	StatusOK Status = "ok"
	// StatusUnsupported means the kernel lacks the mechanism; nothing was applied.
	StatusUnsupported Status = "unsupported"
	// StatusFailed means the step was attempted and is not in effect, or could not be checked.
	StatusFailed Status = "failed"
)

// StepResult records one hardening step.
type StepResult struct {
	Step   string `json:"step"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
}

// Report lists every step Apply took, in order: rlimit_core, rlimit_nofile and rlimit_fsize
// (the last two when configured), no_new_privs, landlock_fs, landlock_net and landlock_scope
// (or a single "landlock" step when Landlock is absent or could not be enforced), seccomp.
type Report []StepResult

// Apply confines the calling process, all its threads and all its future children, for good.
// The order is rlimits, no_new_privs, Landlock, seccomp. Every step is attempted even after one
// fails, so a caller that decides to carry on still gets every layer that works; the error
// joins the failures. A kernel without Landlock is not an error unless cfg.RequireLandlock.
func Apply(cfg Config, log *slog.Logger) (Report, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := recorder{log: log}
	r.add(setRlimits(cfg.Rlimits)...)
	r.add(setNoNewPrivs())
	r.add(restrictLandlock(cfg)...)
	r.add(loadSeccomp())
	return r.report, errors.Join(r.errs...)
}

// outcome is a StepResult plus the error it contributes to Apply's result, if any.
type outcome struct {
	StepResult
	err error
}

func stepOK(step, detail string) outcome {
	return outcome{StepResult: StepResult{step, StatusOK, detail}}
}

func stepUnsupported(step, detail string) outcome {
	return outcome{StepResult: StepResult{step, StatusUnsupported, detail}}
}

// stepFailed records err as the step's detail. The error it contributes is a failed precondition
// (the process is not confined as asked) unless err already says the kernel lacks a feature.
func stepFailed(step string, err error) outcome {
	wrapped := fmt.Errorf("harden %s: %w: %w", step, errdefs.ErrFailedPrecondition, err)
	if errors.Is(err, errdefs.ErrUnavailable) {
		wrapped = fmt.Errorf("harden %s: %w", step, err)
	}
	return outcome{StepResult{step, StatusFailed, err.Error()}, wrapped}
}

type recorder struct {
	log    *slog.Logger
	report Report
	errs   []error
}

func (r *recorder) add(outs ...outcome) {
	for _, o := range outs {
		level := slog.LevelInfo
		switch o.Status {
		case StatusUnsupported:
			level = slog.LevelWarn
		case StatusFailed:
			level = slog.LevelError
		}
		r.log.LogAttrs(context.Background(), level, "harden",
			slog.String("step", o.Step), slog.String("status", string(o.Status)), slog.String("detail", o.Detail))
		r.report = append(r.report, o.StepResult)
		if o.err != nil {
			r.errs = append(r.errs, o.err)
		}
	}
}

// validate rejects a config that would not confine anything meaningful, naming the field.
func (c Config) validate() error {
	if c.Workspace == "" {
		return invalid("Workspace", "is required")
	}
	fields := []struct {
		name  string
		paths []string
	}{
		{"Workspace", []string{c.Workspace}},
		{"TempDir", nonEmpty(c.TempDir)},
		{"ReadOnly", c.ReadOnly},
		{"ReadWriteFiles", c.ReadWriteFiles},
	}
	for _, f := range fields {
		for _, p := range f.paths {
			if err := checkPath(p); err != nil {
				return invalid(f.name, fmt.Sprintf("%q %s", p, err))
			}
		}
	}
	for _, d := range []struct{ name, path string }{{"Workspace", c.Workspace}, {"TempDir", c.TempDir}} {
		if d.path == "" {
			continue
		}
		if fi, err := os.Stat(d.path); err != nil || !fi.IsDir() {
			return invalid(d.name, fmt.Sprintf("%q is not an existing directory", d.path))
		}
	}
	for _, p := range c.AllowConnectTCP {
		if p == 0 {
			return invalid("AllowConnectTCP", "port 0 is not a port")
		}
	}
	return nil
}

// checkPath refuses relative paths and anything that resolves to "/": granting the root
// would switch the filesystem layer off, and the Landlock self-check relies on "/" staying
// unreadable.
func checkPath(p string) error {
	if !filepath.IsAbs(p) {
		return errors.New("is not absolute")
	}
	resolved, err := filepath.EvalSymlinks(p)
	if err != nil {
		resolved = filepath.Clean(p) // missing paths are checked later, where they are used
	}
	if resolved == "/" {
		return errors.New("is the filesystem root")
	}
	return nil
}

func invalid(field, msg string) error {
	return fmt.Errorf("harden: Config.%s %s: %w", field, msg, errdefs.ErrInvalidArgument)
}

func nonEmpty(p string) []string {
	if p == "" {
		return nil
	}
	return []string{p}
}
