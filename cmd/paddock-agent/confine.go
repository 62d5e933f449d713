package main

import (
	"fmt"
	"log/slog"

	"github.com/paddockhq/paddock/internal/agent"
	"github.com/paddockhq/paddock/internal/wire"
)

// confine returns how the agent confines itself in the process tier.
func confine(log *slog.Logger) agent.Confiner {
	return func(env *wire.Envelope) error {
		return fmt.Errorf("process tier confinement is not wired yet")
	}
}
