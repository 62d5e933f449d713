// Package api is the control plane's HTTP contract: the JSON shapes of /api/v1 and /auth,
// the one error shape every handler answers with, and the strict request decoder. The
// server, the CLI's client and the tests share it, and api/openapi.yaml documents it (a
// test keeps the two in step).
package api

import (
	"time"
)

// Roles of a user's two standing sandboxes. Every authenticated runtime path is owned by
// exactly one of them: the user's live sandbox, or their dev one when they chose it.
const (
	RoleLive = "live"
	RoleDev  = "dev"
)

// Sandbox states.
const (
	StateCreating = "creating"
	StateRunning  = "running"
	StateStopped  = "stopped"
	// StateFailed: the sandbox could not be started or died; Error says why. It can be
	// started again or deleted.
	StateFailed = "failed"
	// StateLost: the control plane restarted and could not re-adopt the sandbox. Its
	// workspace is kept; start or delete it.
	StateLost = "lost"
)

// Response headers the role-aware proxy adds, so that a client sees which sandbox served it.
const (
	HeaderRole    = "X-Paddock-Role"
	HeaderSandbox = "X-Paddock-Sandbox"
	// HeaderClientBuild is sent by a client: the runtime build its code was loaded from.
	// A request that reaches a sandbox running another build is counted as a runtime
	// mismatch. The query parameter QueryClientBuild does the same where a header cannot
	// be set (a browser's WebSocket).
	HeaderClientBuild = "X-Paddock-Client-Build"
	QueryClientBuild  = "paddock_build"
	// HeaderMismatch is set on responses to such requests.
	HeaderMismatch = "X-Paddock-Runtime-Mismatch"
)

// CloseOwnerChanged is the WebSocket close code with which the proxy closes connections
// held by a sandbox that no longer owns the role they were opened for (after a promotion
// or a role change): the client should reconnect, and will reach the new owner.
const CloseOwnerChanged = 4001

// CloseOwnerGone is the close code for a connection whose sandbox stopped or was deleted.
const CloseOwnerGone = 4002

// Error is the body of every error response: {"error": {"code": …, "message": …}}.
type Error struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody says what went wrong. Code is one of the Code* constants; Message is for
// people and names what was wrong.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Limit names the limit that was hit (one of the Limit* names), on some
	// limit_exceeded errors.
	Limit string `json:"limit,omitempty"`
}

// Error codes, one per HTTP status the API answers with.
const (
	CodeInvalidArgument    = "invalid_argument"    // 400
	CodeUnauthenticated    = "unauthenticated"     // 401
	CodePermissionDenied   = "permission_denied"   // 403
	CodeNotFound           = "not_found"           // 404
	CodeMethodNotAllowed   = "method_not_allowed"  // 405
	CodeAlreadyExists      = "already_exists"      // 409
	CodeFailedPrecondition = "failed_precondition" // 409
	CodeStale              = "stale"               // 412
	CodeTooLarge           = "payload_too_large"   // 413
	CodeUnsupportedMedia   = "unsupported_media"   // 415
	CodeLimitExceeded      = "limit_exceeded"      // 429
	CodeInternal           = "internal"            // 500
	CodeDataLoss           = "data_loss"           // 500, with a message: stored data is corrupt
	CodeUnavailable        = "unavailable"         // 503
	CodeDeadlineExceeded   = "deadline_exceeded"   // 504
)

// User is the caller as GET /api/v1/me and GET /auth/session show it.
type User struct {
	ID       string `json:"id"`
	Username string `json:"username"`
	// Role is "user" or "admin".
	Role string `json:"role"`
	// Scopes, in GET /api/v1/me, are what the caller's credentials may do: an API token's
	// scopes, or every scope its user may for a signed-in browser.
	Scopes []string `json:"scopes,omitempty"`
}

// AgentChoice is what a user picks for the coding agent in their sandboxes (PUT
// /api/v1/me/agent): a gateway provider by name and a model. An empty field leaves the
// server's default: the gateway's first OpenAI-style provider (else its first Anthropic
// one) and its agent_model.
type AgentChoice struct {
	Provider string `json:"provider"`
	Model    string `json:"model"`
}

// AgentSettings is GET /api/v1/me/agent: the caller's choice, the server's default model,
// and the providers there are to choose from (never a key).
type AgentSettings struct {
	AgentChoice
	// DefaultModel is the server's gateway.agent_model ("" when it sets none).
	DefaultModel string          `json:"default_model"`
	Providers    []AgentProvider `json:"providers"`
}

// AgentProvider is one of the gateway's providers: its name and the API it speaks,
// "openai" or "anthropic".
type AgentProvider struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
}

// Session is GET /auth/session: who is signed in, and the CSRF token that state-changing
// browser requests must carry (header X-CSRF-Token or form field csrf_token).
type Session struct {
	User      User   `json:"user"`
	CSRFToken string `json:"csrf_token,omitempty"`
	// Role is the role the browser's requests are proxied to: live or dev.
	Role string `json:"role"`
}

// Credentials is POST /auth/login and POST /auth/register (JSON form).
type Credentials struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// RegisterRequest is POST /auth/register (JSON or form).
type RegisterRequest struct {
	Username string `json:"username"`
	Password string `json:"password"`
	// Invite is the invite code an admin made; needed when the server's registration
	// mode is invite.
	Invite string `json:"invite,omitempty"`
}

// CreateInviteRequest is POST /api/v1/invites (admins).
type CreateInviteRequest struct {
	// Uses is how many accounts the invite may make (default 1, at most 1000).
	Uses int `json:"uses,omitempty"`
	// ExpiresIn is its lifetime as a Go duration (default "168h", at most "2160h").
	ExpiresIn string `json:"expires_in,omitempty"`
}

// Invite describes a registration invite. Code is set only in the answer that made it.
type Invite struct {
	ID        string     `json:"id"`
	Prefix    string     `json:"prefix"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt time.Time  `json:"expires_at"`
	MaxUses   int        `json:"max_uses"`
	Uses      int        `json:"uses"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	Code      string     `json:"code,omitempty"`
}

// InviteList is GET /api/v1/invites.
type InviteList struct {
	Invites []Invite `json:"invites"`
}

// Registration answers POST /auth/register: the recovery codes are shown this once.
type Registration struct {
	User          User     `json:"user"`
	RecoveryCodes []string `json:"recovery_codes"`
}

// RecoverRequest is POST /auth/recovery: a recovery code sets a new password.
type RecoverRequest struct {
	Username     string `json:"username"`
	RecoveryCode string `json:"recovery_code"`
	NewPassword  string `json:"new_password"`
}

// TokenRequest is POST /auth/token: the CLI trades a password for an API token.
type TokenRequest struct {
	Username string `json:"username"`
	Password string `json:"password"`
	// Name labels the token in listings ("paddock CLI on laptop").
	Name string `json:"name"`
}

// CreateTokenRequest is POST /api/v1/tokens (signed in already).
type CreateTokenRequest struct {
	Name string `json:"name"`
	// Scopes are what the token may do: read, write, tokens, admin (default read and
	// write). A token minting a token can grant only scopes it holds.
	Scopes []string `json:"scopes,omitempty"`
	// ExpiresIn is the token's lifetime as a Go duration ("24h", "90m"); default and
	// maximum are the server's tokens.default_ttl and tokens.max_ttl. A token minting a
	// token cannot make one that outlives itself.
	ExpiresIn string `json:"expires_in,omitempty"`
}

// Token describes an API token. Secret is set only in the response that created it.
type Token struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Prefix     string     `json:"prefix"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	Scopes     []string   `json:"scopes"`
	Secret     string     `json:"token,omitempty"`
}

// TokenList is GET /api/v1/tokens.
type TokenList struct {
	Tokens []Token `json:"tokens"`
}

// RoleRequest is POST /auth/role: which role this browser's requests go to.
type RoleRequest struct {
	Role string `json:"role"`
}

// Template is what a sandbox runs as its app: a command and the port it serves on inside
// the sandbox. The default template is the agent's built-in welcome page.
type Template struct {
	Command []string `json:"command,omitempty"`
	Port    int      `json:"port,omitempty"`
	// Build labels the runtime build the app serves (a version or a hash); clients report
	// theirs in X-Paddock-Client-Build, and a difference is a runtime mismatch.
	Build string `json:"build,omitempty"`
	// Dir is where the command runs, relative to the workspace; empty is the workspace.
	Dir string `json:"dir,omitempty"`
	// HotReload says the app reloads changed files itself (a dev server with hot module
	// replacement): an undo or restore of the workspace does not restart it.
	HotReload bool `json:"hot_reload,omitempty"`
	// Provider is the runtime provider whose dev server this is (set by a preview): a
	// promotion then releases the packaged build rather than swapping.
	Provider string `json:"provider,omitempty"`
}

// Sandbox is a sandbox as the API shows it.
type Sandbox struct {
	ID string `json:"id"`
	// Owner is the owning user's ID, and OwnerName their username.
	Owner     string `json:"owner"`
	OwnerName string `json:"owner_name,omitempty"`
	Name      string `json:"name"`
	// Role is live or dev when the sandbox is one of its owner's two standing ones.
	Role    string `json:"role,omitempty"`
	Tier    string `json:"tier"`
	Runtime string `json:"runtime,omitempty"`
	State   string `json:"state"`
	// Node is the cluster node the sandbox runs on, when sandboxes run on a Kubernetes
	// cluster and this one is running; empty on one host.
	Node   string   `json:"node,omitempty"`
	Error  string   `json:"error,omitempty"`
	Limits Limits   `json:"limits"`
	App    Template `json:"app"`
	// Env are extra NAME=VALUE entries for the sandbox's processes.
	Env       []string  `json:"env,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Limits are a sandbox's resource limits. Sizes are strings with units ("512M", "1GiB")
// in requests and plain byte counts in responses.
type Limits struct {
	Memory string `json:"memory,omitempty"`
	// MemoryBytes is the memory limit in bytes (responses).
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"`
	Pids        int64   `json:"pids,omitempty"`
	// Tmp sizes the sandbox's /tmp, a tmpfs whose pages count as its memory (requests);
	// TmpBytes is that size in bytes (responses). Unset: the runner's default (1GiB).
	Tmp      string `json:"tmp,omitempty"`
	TmpBytes int64  `json:"tmp_bytes,omitempty"`
	// FileSize is the largest file a command in the sandbox may write, RLIMIT_FSIZE
	// (requests); FileSizeBytes is that size in bytes (responses). Unset: no limit.
	FileSize      string `json:"file_size,omitempty"`
	FileSizeBytes int64  `json:"file_size_bytes,omitempty"`
	// Disk bounds the sandbox's workspace and /tmp together on disk (requests); a write
	// past it fails with ENOSPC. DiskBytes is that size in bytes (responses). Unset: the
	// server's default (limits.disk in its configuration).
	Disk      string `json:"disk,omitempty"`
	DiskBytes int64  `json:"disk_bytes,omitempty"`
}

// CreateSandboxRequest is POST /api/v1/sandboxes. Every field is optional.
type CreateSandboxRequest struct {
	Name    string   `json:"name,omitempty"`
	Tier    string   `json:"tier,omitempty"`
	Runtime string   `json:"runtime,omitempty"`
	Limits  Limits   `json:"limits,omitempty"`
	App     Template `json:"app,omitempty"`
	Env     []string `json:"env,omitempty"`
}

// SandboxList is GET /api/v1/sandboxes (add ?all=true, as an admin, for every user's).
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

// Roles is GET /api/v1/roles and the answer to POST /api/v1/promote: the caller's two
// standing sandboxes. Generation counts swaps.
type Roles struct {
	Live       Sandbox `json:"live"`
	Dev        Sandbox `json:"dev"`
	Generation int64   `json:"generation"`
	// Mode, in a promotion's answer, is what it did: PromoteSwap or PromoteRelease.
	Mode string `json:"mode,omitempty"`
	// Artifact is the artifact a release promotion made live serve.
	Artifact string `json:"artifact,omitempty"`
	// Note says what the caller should know about the promotion: a release of an
	// artifact packaged before dev's latest changes.
	Note string `json:"note,omitempty"`
}

// Promotion modes. Auto releases dev's newest artifact into live when dev runs a
// provider's dev server and has one, and swaps otherwise.
const (
	PromoteAuto    = "auto"
	PromoteSwap    = "swap"
	PromoteRelease = "release"
)

// PromoteRequest is POST /api/v1/promote; an empty body is Mode auto.
type PromoteRequest struct {
	// Mode is auto (the default), swap or release.
	Mode string `json:"mode,omitempty"`
}

// ExecRequest is POST /api/v1/sandboxes/{id}/exec: a one-shot command.
type ExecRequest struct {
	Argv []string `json:"argv"`
	// Env is added to the sandbox's environment (an entry replaces one of the same name).
	Env []string `json:"env,omitempty"`
	Cwd string   `json:"cwd,omitempty"`
	// Stdin is the command's whole standard input (base64 in JSON).
	Stdin []byte `json:"stdin,omitempty"`
	// TimeoutMS kills the command after that many milliseconds; 0 means 60 s, at most 10 min.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// MaxOutputBytes bounds stdout and stderr each; 0 means 1 MiB, at most 16 MiB.
	MaxOutputBytes int64 `json:"max_output_bytes,omitempty"`
}

// ExecResult is the answer to an ExecRequest. Stdout and Stderr are base64 in JSON, so
// that no byte is lost.
type ExecResult struct {
	ExitCode        int    `json:"exit_code"`
	Signal          int    `json:"signal,omitempty"`
	Stdout          []byte `json:"stdout"`
	Stderr          []byte `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	TimedOut        bool   `json:"timed_out,omitempty"`
	// Limit names the limit that ended or hurt the command, if one did: LimitTimeout,
	// LimitMemory, LimitPids, LimitFileSize or LimitDisk.
	Limit string `json:"limit,omitempty"`
	// Error says why the command could not start (exit code 126 or 127), or, with Limit,
	// which limit it met and its value.
	Error string `json:"error,omitempty"`
}

// The limits ExecResult.Limit and StreamExit.Limit name. Memory and pids are the
// sandbox's, counted by its cgroup for the whole sandbox while the command ran: what
// else runs in it at the same time (its app, another exec) can meet them too.
const (
	// LimitTimeout: the command outlived the exec's timeout or the policy's
	// resources.timeout, and was killed.
	LimitTimeout = "timeout"
	// LimitMemory: the sandbox's memory limit was hit and the kernel killed a process
	// (the command, or one it started: a command may carry on, even exit 0).
	LimitMemory = "memory"
	// LimitPids: the sandbox's process limit refused a fork (or a new thread).
	LimitPids = "pids"
	// LimitFileSize: the command wrote past the sandbox's file size limit and SIGXFSZ
	// ended it.
	LimitFileSize = "file_size"
	// LimitDisk: the sandbox's disk is full (its workspace and /tmp are at the disk limit):
	// a write failed with ENOSPC.
	LimitDisk = "disk"
)

// FileInfo describes a file in a sandbox's workspace.
type FileInfo struct {
	Name    string    `json:"name"`
	Path    string    `json:"path"`
	Size    int64     `json:"size"`
	Mode    string    `json:"mode"`
	IsDir   bool      `json:"is_dir"`
	ModTime time.Time `json:"mod_time"`
	// ETag is a written file's content tag, answered in the ETag header (unquoted here).
	ETag string `json:"-"`
}

// FileList is GET /api/v1/sandboxes/{id}/files/list?path=…
type FileList struct {
	Path    string     `json:"path"`
	Entries []FileInfo `json:"entries"`
}

// FileMkdirRequest is POST /api/v1/sandboxes/{id}/files/mkdir's body. Paths name the
// workspace, as the file routes' ?path= does.
type FileMkdirRequest struct {
	Path string `json:"path"`
	// Parents makes missing parents and accepts an existing directory, as mkdir -p.
	Parents bool `json:"parents,omitempty"`
	// Mode is the directory's octal permission ("755", the default; sticky too, as
	// "1775"; setuid and setgid are refused), set exactly: the sandbox's umask does not
	// cut it.
	Mode string `json:"mode,omitempty"`
}

// FileMoveRequest is POST /api/v1/sandboxes/{id}/files/move's body.
type FileMoveRequest struct {
	From string `json:"from"`
	To   string `json:"to"`
	// Overwrite replaces what is at To (a file, or an empty directory when From is
	// one); without it an existing To is a conflict.
	Overwrite bool `json:"overwrite,omitempty"`
}

// Event is one entry of the event log (GET /api/v1/events).
type Event struct {
	ID     int64          `json:"id"`
	At     time.Time      `json:"at"`
	Actor  string         `json:"actor"`
	Action string         `json:"action"`
	Target string         `json:"target,omitempty"`
	Detail map[string]any `json:"detail,omitempty"`
}

// MCPToolCall is POST /api/v1/events/mcp: an MCP tool call that a client serving MCP
// itself (`paddock mcp`, over stdio) reports, to be recorded as the caller's event.
type MCPToolCall struct {
	// Tool is the tool's name, one of the MCP server's tools.
	Tool string `json:"tool"`
	// Sandbox is the sandbox the call named, if any: one of the caller's.
	Sandbox string `json:"sandbox,omitempty"`
	// Error is how the call failed (an error code), or empty when it did not.
	Error string `json:"error,omitempty"`
}

// EventList is GET /api/v1/events.
type EventList struct {
	Events []Event `json:"events"`
}

// Health is GET /healthz.
type Health struct {
	// Status is "ok" or "unavailable".
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}
