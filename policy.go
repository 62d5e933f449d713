package paddock

import (
	"bytes"
	"context"
	"net/http"
)

// Policy returns the policy in force for the sandbox and where it comes from.
func (s *Sandbox) Policy(ctx context.Context) (SandboxPolicy, error) {
	var p SandboxPolicy
	err := s.c.do(ctx, "GET", s.path("policy"), nil, &p, http.StatusOK)
	return p, err
}

// SetPolicy attaches the policy file text (YAML) to the sandbox. A policy that does not
// load is refused with the server's message, which names the line and the field, and the
// sandbox keeps the policy it had.
func (s *Sandbox) SetPolicy(ctx context.Context, text []byte) (SandboxPolicy, error) {
	var p SandboxPolicy
	resp, err := s.c.raw(ctx, "PUT", s.path("policy"), bytes.NewReader(text), "application/yaml")
	if err != nil {
		return p, err
	}
	err = decodeRaw(resp, &p, "PUT "+s.path("policy"))
	return p, err
}

// DeletePolicy detaches the sandbox's own policy; its owner's or the server's default
// is in force then.
func (s *Sandbox) DeletePolicy(ctx context.Context) error {
	return s.c.do(ctx, "DELETE", s.path("policy"), nil, nil, http.StatusNoContent)
}
