package main

import (
	"log/slog"

	"github.com/paddockhq/paddock/internal/agent"
	"github.com/paddockhq/paddock/internal/harden"
	"github.com/paddockhq/paddock/internal/wire"
)

// devices are the device files a process-tier sandbox may read and write.
var devices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx", "/dev/pts"}

// confine returns how the agent confines itself in the process tier: Landlock, seccomp,
// rlimits and no_new_privs, applied to the agent so that everything it starts inherits
// them. Landlock is best effort (the seed's degraded tier), and every step is logged with
// its outcome; seccomp failing is an error.
func confine(log *slog.Logger) agent.Confiner {
	return func(env *wire.Envelope) error {
		p := env.Process
		cfg := harden.Config{
			Workspace:      env.Workspace,
			TempDir:        p.TempDir,
			ReadOnly:       p.ReadOnly,
			ReadWriteFiles: devices,
			Rlimits:        harden.Rlimits{NoFile: p.MaxOpenFiles, FileSize: uint64(p.MaxFileSize)},
		}
		_, err := harden.Apply(cfg, log)
		return err
	}
}
