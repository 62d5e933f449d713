package paddock

import "github.com/paddockhq/paddock/internal/api"

// The API's JSON shapes, as api/openapi.yaml documents them.
type (
	// SandboxInfo describes a sandbox: its ID, name, state, role, limits.
	SandboxInfo = api.Sandbox
	// Limits are a sandbox's resource limits; sizes are strings with units ("512M").
	Limits = api.Limits
	// Template is the app a sandbox supervises.
	Template = api.Template
	// CreateSandboxRequest is the full request SandboxSpec is a shorthand for.
	CreateSandboxRequest = api.CreateSandboxRequest
	// ExecRequest is a one-shot command: argv, env, working directory, stdin, timeout.
	ExecRequest = api.ExecRequest
	// ExecResult is how a one-shot command ended and what it wrote. Limit names the
	// limit that ended or hurt it (LimitTimeout, LimitMemory, …).
	ExecResult = api.ExecResult
	// StreamStart starts a streamed command; TTY set runs it on a terminal.
	StreamStart = api.StreamStart
	// TTYSize is a terminal's size.
	TTYSize = api.TTYSize
	// StreamExit is how a streamed command ended.
	StreamExit = api.StreamExit
	// FileInfo describes a file of a sandbox's workspace.
	FileInfo = api.FileInfo
	// FileMkdirRequest makes a directory: path, parents, an octal mode ("755").
	FileMkdirRequest = api.FileMkdirRequest
	// ArchiveResult is what an archive made in a sandbox.
	ArchiveResult = api.ArchiveResult
	// History is a workspace's timeline of checkpoints, newest first.
	History = api.History
	// Checkpoint is one recorded state of a workspace.
	Checkpoint = api.Checkpoint
	// CheckpointResult answers Checkpoint; Created is false when nothing had changed.
	CheckpointResult = api.CheckpointResult
	// RestoreResult answers Undo, Redo, Restore and ImportHistory.
	RestoreResult = api.RestoreResult
	// ForkResult answers Fork: the new sandbox and the checkpoint it starts from.
	ForkResult = api.ForkResult
	// Backup is one backup of a workspace's history to the server's S3 store.
	Backup = api.Backup
	// BackupList is a sandbox's backups and the state of those not in the store.
	BackupList = api.BackupList
	// BackupRestoreRequest picks a backup (by ID or time) and where it goes.
	BackupRestoreRequest = api.BackupRestoreRequest
	// BackupRestoreResult says what was restored, and into which sandbox.
	BackupRestoreResult = api.BackupRestoreResult
	// BackupSandboxList is every sandbox with backups in the store, as their records tell.
	BackupSandboxList = api.BackupSandboxList
	// BackupSandbox is one sandbox with backups in the store.
	BackupSandbox = api.BackupSandbox
	// BackupPruneRequest runs the backups' retention now; BackupPruneResult says what it
	// removed (or, dry, would remove), each backup a BackupRef.
	BackupPruneRequest = api.BackupPruneRequest
	BackupPruneResult  = api.BackupPruneResult
	BackupRef          = api.BackupRef
	// HistoryDiff lists the paths two checkpoints differ in.
	HistoryDiff = api.HistoryDiff
	// Transaction is an open multi-step change of a workspace.
	Transaction = api.Transaction
	// CommitResult answers Commit; RollbackResult answers Rollback.
	CommitResult   = api.CommitResult
	RollbackResult = api.RollbackResult
	// AppStatus is what a sandbox's supervised app is doing.
	AppStatus = api.AppStatus
	// SandboxPolicy is the policy in force for a sandbox and where it comes from.
	SandboxPolicy = api.SandboxPolicy
	// CapabilityRequest asks for a capability token; Capability describes one.
	CapabilityRequest = api.CapabilityRequest
	Capability        = api.Capability
	// Event is an audit event: who did what to what.
	Event = api.Event
	// MCPToolCall is an MCP tool call to record as an event (Client.RecordMCPToolCall).
	MCPToolCall = api.MCPToolCall
	// AgentChoice is a user's provider and model for the coding agent; AgentSettings
	// adds what there is to choose from.
	AgentChoice   = api.AgentChoice
	AgentSettings = api.AgentSettings
	AgentProvider = api.AgentProvider
	// User is a user of the server; Account is one as an admin's list shows it.
	User    = api.User
	Account = api.AccountInfo
	// Token describes an API token; Secret is set only in the answer that made it.
	Token = api.Token
	// CreateTokenRequest asks for an API token: name, scopes, lifetime.
	CreateTokenRequest = api.CreateTokenRequest
	// Invite is a registration invite; CreateInviteRequest asks for one.
	Invite              = api.Invite
	CreateInviteRequest = api.CreateInviteRequest
	// Secret describes a secret, never with its value.
	Secret = api.Secret
	// Roles are the caller's live and dev sandboxes.
	Roles = api.Roles
	// Health is the server's health check.
	Health = api.Health
)

// Promotion modes (Client.PromoteMode, Roles.Mode).
const (
	// PromoteAuto releases dev's artifact into live when dev runs a provider's dev
	// server and has one, and swaps otherwise.
	PromoteAuto = api.PromoteAuto
	// PromoteSwap swaps the live and dev sandboxes.
	PromoteSwap = api.PromoteSwap
	// PromoteRelease makes live serve dev's newest artifact; dev is left as it is.
	PromoteRelease = api.PromoteRelease
)

// Sandbox states (SandboxInfo.State).
const (
	StateCreating = "creating"
	StateRunning  = "running"
	StateStopped  = "stopped"
	// StateFailed: the sandbox could not start or died; SandboxInfo.Error says why.
	StateFailed = "failed"
	// StateLost: the server restarted and could not take the sandbox back; its workspace
	// is kept: start or delete it.
	StateLost = "lost"
)
