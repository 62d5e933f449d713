package api

import "time"

// Where the policy in force for a sandbox comes from, in precedence order: its own, its
// owner's, the server's default; none when there is no policy at all (everything is
// allowed). The first that exists is the whole policy: they are not merged.
const (
	PolicySandbox = "sandbox"
	PolicyUser    = "user"
	PolicyDefault = "default"
	PolicyNone    = "none"
)

// PolicyMediaTypes are the content types PUT /api/v1/sandboxes/{id}/policy accepts: the
// body is the policy file itself.
var PolicyMediaTypes = []string{"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml", "text/plain"}

// SandboxPolicy is GET and PUT /api/v1/sandboxes/{id}/policy: the policy in force for the
// sandbox and where it comes from.
type SandboxPolicy struct {
	Sandbox string `json:"sandbox"`
	// Source is one of the Policy* constants.
	Source string `json:"source"`
	// Policy is the YAML of the policy in force ("" when Source is none).
	Policy string `json:"policy"`
	// Summary says in one line what the policy holds, section by section.
	Summary string `json:"summary,omitempty"`
	// UpdatedAt is when the sandbox's own policy was attached (Source sandbox only).
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
	// Limits are the sandbox's recorded limits. Attaching a policy with resources sets
	// them (memory, cpus, pids), and the sandbox runs with them from its next start or
	// restart; resources.timeout bounds every exec at once.
	Limits Limits `json:"limits"`
}
