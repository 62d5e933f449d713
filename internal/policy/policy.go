package policy

import (
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"

	"github.com/paddockhq/paddock/internal/wire"
)

// Decision is the engine's answer to one question, with the rule that gave it and why.
// Decisions are audit events: Rule and Reason are meant to be stored and shown.
type Decision struct {
	// Allow is true when the action may go ahead.
	Allow bool
	// Rule names the rule that decided, as a field path into the policy file:
	// "shell.deny[1]", "files.jail", "network.default". A decision that no single entry
	// made names the section ("shell", "files") or list ("shell.allow_prefixes").
	Rule string
	// Reason says in words why.
	Reason string
	// RequireCapability, on a host decision that allows, says that the policy also asks
	// for a net: capability token that allows the host (network.require_capability).
	RequireCapability bool
	// Private, on a host decision that allows, are the address ranges the host may be
	// reached at though they are private (network.private), or nil. The policy holds
	// them, so decisions stay comparable.
	Private *PrivateRanges
}

// PrivateRanges are address ranges network.private opens for a host.
type PrivateRanges struct {
	// Rule names the entry ("network.private[0]"), or the list for its ranges.
	Rule     string
	Prefixes []netip.Prefix
}

// String is the decision as one line: "deny shell.deny[0]: …".
func (d Decision) String() string {
	verb := "deny"
	if d.Allow {
		verb = "allow"
	}
	return verb + " " + d.Rule + ": " + d.Reason
}

// LogValue lets slog record a decision as a group of its fields.
func (d Decision) LogValue() slog.Value {
	return slog.GroupValue(slog.Bool("allow", d.Allow), slog.String("rule", d.Rule), slog.String("reason", d.Reason))
}

func allow(rule, format string, args ...any) Decision {
	return Decision{Allow: true, Rule: rule, Reason: fmt.Sprintf(format, args...)}
}

func deny(rule, format string, args ...any) Decision {
	return Decision{Rule: rule, Reason: fmt.Sprintf(format, args...)}
}

// Policy is a loaded policy file. It is immutable and safe for concurrent use; the zero
// value is not valid, use [Load].
type Policy struct {
	source  string
	shell   shellRules
	files   fileRules
	network networkRules
	// resources are the limits the policy sets (resources:); a zero field is not set,
	// and the runner's defaults apply.
	resources wire.Limits
}

// Source is the name the policy was loaded under.
func (p *Policy) Source() string { return p.source }

// Resources returns the resource limits the policy sets.
func (p *Policy) Resources() wire.Limits { return p.resources }

// HasNetwork says whether the policy has a network section (Host denies everything
// otherwise).
func (p *Policy) HasNetwork() bool { return p.network.set }

// RequiresNetCapability is network.require_capability: whether every connection through
// the egress proxy must carry a net: capability token that allows its host, besides being
// allowed by the rules. A token can only narrow what the rules allow.
func (p *Policy) RequiresNetCapability() bool { return p.network.requireCapability }

// MaxFileSize is files.max_file_size in bytes, 0 when the policy has none: a writer
// that knows it can stop as soon as a file passes it.
func (p *Policy) MaxFileSize() int64 { return p.files.maxSize }

// Jail is the directory file decisions are made in ("" when the policy has no files
// section).
func (p *Policy) Jail() string { return p.files.jail }

// Summary says in one line what the policy holds, section by section.
func (p *Policy) Summary() string {
	parts := []string{p.shell.summary(), p.files.summary(), p.network.summary()}
	if r := resourcesSummary(p.resources); r != "" {
		parts = append(parts, r)
	}
	return strings.Join(parts, "; ")
}

func resourcesSummary(r wire.Limits) string {
	var s []string
	if r.Memory != 0 {
		s = append(s, "memory "+r.Memory.String())
	}
	if r.CPUs != 0 {
		s = append(s, fmt.Sprintf("cpus %g", r.CPUs))
	}
	if r.Pids != 0 {
		s = append(s, fmt.Sprintf("pids %d", r.Pids))
	}
	if r.Timeout != 0 {
		s = append(s, "timeout "+r.Timeout.String())
	}
	if r.Tmp != 0 {
		s = append(s, "tmp "+r.Tmp.String())
	}
	if r.FileSize != 0 {
		s = append(s, "file_size "+r.FileSize.String())
	}
	if r.Disk != 0 {
		s = append(s, "disk "+r.Disk.String())
	}
	if len(s) == 0 {
		return ""
	}
	return "resources: " + strings.Join(s, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
