// Package wire holds paddock's contracts between the trusted host and the sandbox: the
// isolation tier, the bootstrap envelope the runner hands the agent at start, the names
// both sides must agree on (paths inside the sandbox, flags, the VM layout, environment
// variables), the rule that resolves a caller's path in the workspace, and (in package
// agentv1) the agent's RPC and (in package channel) its gRPC options. It depends on
// neither side: the control plane links it and not the agent's code.
//
// Everything here is decoded from bytes that may have been written by, or passed through,
// the sandbox, so every decoder validates sizes and fields and names the field it rejects.
package wire

import (
	"fmt"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Tier is a sandbox's isolation tier, strongest first.
type Tier string

const (
	// TierMicroVM gives each sandbox its own kernel (Firecracker or QEMU microvm).
	TierMicroVM Tier = "microvm"
	// TierContainer runs the sandbox as an OCI container (runc, or runsc for gVisor).
	TierContainer Tier = "container"
	// TierProcess is the explicitly insecure tier: a host process under Landlock, seccomp,
	// rlimits and cgroups, with no namespaces. Only the main command runs; sessions are
	// unavailable.
	TierProcess Tier = "process"
)

// Tiers lists every tier, strongest first.
var Tiers = []Tier{TierMicroVM, TierContainer, TierProcess}

// ParseTier returns the tier named s, or an error listing the valid names.
func ParseTier(s string) (Tier, error) {
	for _, t := range Tiers {
		if string(t) == s {
			return t, nil
		}
	}
	return "", fmt.Errorf("unknown tier %q (want microvm, container or process): %w", s, errdefs.ErrInvalidArgument)
}

// Valid reports whether t is one of Tiers.
func (t Tier) Valid() bool {
	_, err := ParseTier(string(t))
	return err == nil
}
