package paddock

import (
	"context"
	"net/http"
	"net/url"

	"github.com/paddockhq/paddock/internal/api"
)

// Sandboxes creates, lists and finds sandboxes (Client.Sandboxes).
type Sandboxes struct {
	c *Client
}

// SandboxSpec is what a new sandbox is made with; every field is optional. Sizes are
// strings with units ("512M", "1GiB").
type SandboxSpec struct {
	Name string
	// Tier is the isolation: container (the default) or microvm, as the server offers.
	Tier     string
	Memory   string
	CPUs     float64
	Pids     int64
	Tmp      string
	FileSize string
	// Disk bounds the workspace and /tmp together.
	Disk string
	// Env is extra environment (KEY=VALUE) for the sandbox's commands.
	Env []string
	// App is the app the sandbox supervises, if any.
	App Template
}

func (s SandboxSpec) request() CreateSandboxRequest {
	return CreateSandboxRequest{Name: s.Name, Tier: s.Tier, Env: s.Env, App: s.App, Limits: Limits{
		Memory: s.Memory, CPUs: s.CPUs, Pids: s.Pids, Tmp: s.Tmp, FileSize: s.FileSize, Disk: s.Disk}}
}

// Create creates and starts a sandbox. A sandbox that was recorded but failed to start is
// returned without an error, in state StateFailed with its Error set.
func (s *Sandboxes) Create(ctx context.Context, spec SandboxSpec) (*Sandbox, error) {
	return s.CreateRequest(ctx, spec.request())
}

// CreateRequest creates a sandbox from the full request (runtime, limits in bytes).
func (s *Sandboxes) CreateRequest(ctx context.Context, req CreateSandboxRequest) (*Sandbox, error) {
	var info SandboxInfo
	if err := s.c.do(ctx, "POST", "/api/v1/sandboxes", req, &info, http.StatusCreated); err != nil {
		return nil, err
	}
	return &Sandbox{ID: info.ID, Info: info, c: s.c}, nil
}

// List lists the caller's sandboxes; with all (admins only), everyone's.
func (s *Sandboxes) List(ctx context.Context, all bool) ([]SandboxInfo, error) {
	path := "/api/v1/sandboxes"
	if all {
		path += "?all=true"
	}
	var list api.SandboxList
	err := s.c.do(ctx, "GET", path, nil, &list, http.StatusOK)
	return list.Sandboxes, err
}

// Get finds sandbox id.
func (s *Sandboxes) Get(ctx context.Context, id string) (*Sandbox, error) {
	sb := s.c.Sandbox(id)
	info, err := sb.Describe(ctx)
	if err != nil {
		return nil, err
	}
	sb.Info = info
	return sb, nil
}

// Sandbox is one sandbox, by its ID. Its methods act on the sandbox as it is on the
// server; Info is what was known when the value was made.
type Sandbox struct {
	ID   string
	Info SandboxInfo
	c    *Client
}

// Sandbox is sandbox id, without asking the server whether it exists (the first call
// says, with ErrNotFound).
func (c *Client) Sandbox(id string) *Sandbox {
	return &Sandbox{ID: id, Info: SandboxInfo{ID: id}, c: c}
}

func (s *Sandbox) path(rest ...string) string { return sandboxPath(s.ID, rest...) }

// Describe asks the server for the sandbox's description now.
func (s *Sandbox) Describe(ctx context.Context) (SandboxInfo, error) {
	var info SandboxInfo
	err := s.c.do(ctx, "GET", s.path(), nil, &info, http.StatusOK)
	return info, err
}

// Delete destroys the sandbox and its workspace.
func (s *Sandbox) Delete(ctx context.Context) error {
	return s.c.do(ctx, "DELETE", s.path(), nil, nil, http.StatusNoContent)
}

// Stop stops the sandbox, keeping its workspace.
func (s *Sandbox) Stop(ctx context.Context) (SandboxInfo, error) { return s.lifecycle(ctx, "stop") }

// Start starts a stopped, failed or lost sandbox.
func (s *Sandbox) Start(ctx context.Context) (SandboxInfo, error) { return s.lifecycle(ctx, "start") }

// Restart stops and starts the sandbox.
func (s *Sandbox) Restart(ctx context.Context) (SandboxInfo, error) {
	return s.lifecycle(ctx, "restart")
}

func (s *Sandbox) lifecycle(ctx context.Context, op string) (SandboxInfo, error) {
	var info SandboxInfo
	err := s.c.do(ctx, "POST", s.path(op), nil, &info, http.StatusOK)
	return info, err
}

// App is what the sandbox's supervised app is doing.
func (s *Sandbox) App(ctx context.Context) (AppStatus, error) {
	var st AppStatus
	err := s.c.do(ctx, "GET", s.path("app"), nil, &st, http.StatusOK)
	return st, err
}

// RestartApp starts the sandbox's app again now, on what its workspace holds (a running
// app gets SIGTERM, then SIGKILL); the rest of the sandbox keeps running.
func (s *Sandbox) RestartApp(ctx context.Context) (AppStatus, error) {
	var st AppStatus
	err := s.c.do(ctx, "POST", s.path("app/restart"), nil, &st, http.StatusOK)
	return st, err
}

// MintCapability mints a capability token for the sandbox; the answer's Token is the
// only copy of it.
func (s *Sandbox) MintCapability(ctx context.Context, req CapabilityRequest) (Capability, error) {
	var out Capability
	err := s.c.do(ctx, "POST", s.path("capabilities"), req, &out, http.StatusCreated)
	return out, err
}

// Capabilities lists the sandbox's capability tokens, newest first (without the tokens).
func (s *Sandbox) Capabilities(ctx context.Context) ([]Capability, error) {
	var out api.CapabilityList
	err := s.c.do(ctx, "GET", s.path("capabilities"), nil, &out, http.StatusOK)
	return out.Capabilities, err
}

// RevokeCapability revokes the sandbox's capability token capID.
func (s *Sandbox) RevokeCapability(ctx context.Context, capID string) (Capability, error) {
	var out Capability
	err := s.c.do(ctx, "DELETE", s.path("capabilities", url.PathEscape(capID)), nil, &out, http.StatusOK)
	return out, err
}
