package api

import "time"

// CapabilityRequest is POST /api/v1/sandboxes/{id}/capabilities: mint a capability token
// for the sandbox (package capability). The token acts on the sandbox's exec and file
// routes only, within what it grants, for TTLSeconds.
type CapabilityRequest struct {
	// Resource is what the token is about: file:/workspace/… (a path and everything under
	// it), exec:program (by name) or exec:*, or net:host (net:*.example.com for every name
	// under it), which the egress proxy takes.
	Resource string `json:"resource"`
	// Actions are what it allows on Resource: read, write, delete (file:), exec (exec:),
	// connect (net:).
	Actions []string `json:"actions"`
	// MaxSize, when set, caps the bytes of a file read or written under it.
	MaxSize int64 `json:"max_size,omitempty"`
	// AllowedExtensions, when set, limits it to files whose name ends in one of them.
	AllowedExtensions []string `json:"allowed_extensions,omitempty"`
	// TTLSeconds is how long it lasts: 1 to MaxCapabilityTTL; 0 means an hour.
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
}

// MaxCapabilityTTL is the longest a minted capability token lasts, in seconds (30 days).
const MaxCapabilityTTL = 30 * 24 * 3600

// Capability describes a capability token minted for a sandbox. Token is set only in the
// answer to the mint: it is the credential, and the control plane keeps only its ID.
type Capability struct {
	ID                string     `json:"id"`
	Sandbox           string     `json:"sandbox"`
	Subject           string     `json:"subject"`
	Resource          string     `json:"resource"`
	Actions           []string   `json:"actions"`
	MaxSize           int64      `json:"max_size,omitempty"`
	AllowedExtensions []string   `json:"allowed_extensions,omitempty"`
	ExpiresAt         time.Time  `json:"expires_at"`
	CreatedAt         time.Time  `json:"created_at"`
	RevokedAt         *time.Time `json:"revoked_at,omitempty"`
	Token             string     `json:"token,omitempty"`
}

// CapabilityList is GET /api/v1/sandboxes/{id}/capabilities, newest first.
type CapabilityList struct {
	Capabilities []Capability `json:"capabilities"`
}
