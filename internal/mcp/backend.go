// Package mcp is paddock's MCP server: one set of tools and resources, written for a
// model, over a Backend. Two backends satisfy it: the public Go client (package paddock),
// which `paddock mcp` serves over stdio with the CLI's stored credentials, and the
// control plane's operations layer (package sandboxops), which `paddock serve` serves
// over streamable HTTP at /mcp. The tools cannot drift between the two transports: they
// are the same code, and only the Backend differs.
//
// Threat model: the Backend is already bound to an authenticated caller; the tools decide
// nothing themselves (policy, capability, ownership and audit are the Backend's), but
// they bound what they return and never return a secret's value.
package mcp

import (
	"context"
	"io/fs"

	"github.com/paddockhq/paddock/internal/api"
)

// Backend is what the tools need, bound to one caller. Errors are in the errdefs
// taxonomy; their messages are shown to the model.
type Backend interface {
	CreateSandbox(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error)
	ListSandboxes(ctx context.Context) ([]api.Sandbox, error)
	// Lifecycle is "stop", "start" or "restart".
	Lifecycle(ctx context.Context, id, op string) (api.Sandbox, error)
	DeleteSandbox(ctx context.Context, id string) error
	AppStatus(ctx context.Context, id string) (api.AppStatus, error)

	// Run runs a command, calling out with each chunk of output as it arrives, until the
	// command exits or ctx ends (the command is then killed and ctx's error returned).
	Run(ctx context.Context, id string, start api.StreamStart, stdin []byte, out func(stream byte, data []byte)) (api.StreamExit, error)

	ListFiles(ctx context.Context, id, dir string) ([]api.FileInfo, error)
	// ReadFile reads at most max bytes of p; more is whether the file goes on.
	ReadFile(ctx context.Context, id, p string, max int64) (data []byte, more bool, err error)
	// WriteFile replaces p with data; mode is its permission bits (0: 0644).
	WriteFile(ctx context.Context, id, p string, data []byte, mode fs.FileMode) (api.FileInfo, error)
	Move(ctx context.Context, id string, req api.FileMoveRequest) (api.FileInfo, error)
	Remove(ctx context.Context, id, p string, recursive bool) error

	History(ctx context.Context, id string) (api.History, error)
	Checkpoint(ctx context.Context, id, message string) (api.CheckpointResult, error)
	Undo(ctx context.Context, id string) (api.RestoreResult, error)
	Redo(ctx context.Context, id string) (api.RestoreResult, error)
	Restore(ctx context.Context, id, checkpoint string) (api.RestoreResult, error)
}

// Auditor is a Backend that records each tool call itself (the operations layer, where
// the API's own requests are events too). tool is the tool's name, sandbox its sandbox
// ("" for none), err how it ended.
type Auditor interface {
	ToolCalled(ctx context.Context, tool, sandbox string, err error)
}
