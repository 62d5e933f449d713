package api

import "time"

// Causes of a checkpoint, as Checkpoint.Cause names them.
const (
	CauseAgentWrite = "agent-write" // the file API changed the workspace
	CauseExec       = "exec"        // a command run through exec ended
	CauseManual     = "manual"      // POST …/history/checkpoints
	CauseRestore    = "restore"     // undo, redo or restore
	CauseWatcher    = "watcher"     // a change by any process, found by the periodic reconcile
	// CauseTransaction is a transaction's commit: all its work as one checkpoint.
	CauseTransaction = "transaction"
)

// Checkpoint is one committed state of a sandbox's workspace.
type Checkpoint struct {
	ID string `json:"id"`
	// Parent is the checkpoint the workspace was at before this one; empty for the first.
	Parent string    `json:"parent,omitempty"`
	Time   time.Time `json:"time"`
	Cause  string    `json:"cause"`
	// Message is the caller's for a manual checkpoint, and says what happened otherwise.
	Message string `json:"message,omitempty"`
	// Changed counts the paths that differ from Parent.
	Changed int `json:"changed"`
	// Restores is, for cause restore, the checkpoint whose state was restored.
	Restores string `json:"restores,omitempty"`
	// Transaction is, for cause transaction, the transaction whose work this is.
	Transaction string `json:"transaction,omitempty"`
	// Compacted is, on the oldest checkpoint kept, how many older ones the history's size
	// budget dropped: undo stops here.
	Compacted int `json:"compacted,omitempty"`
}

// History is GET /api/v1/sandboxes/{id}/history: the timeline, newest first, and the
// checkpoint undo starts from.
type History struct {
	Checkpoints []Checkpoint `json:"checkpoints"`
	Current     string       `json:"current,omitempty"`
	// Transaction is the open transaction, if any.
	Transaction *Transaction `json:"transaction,omitempty"`
	// StoreBytes is what the history takes; past BudgetBytes its oldest checkpoints are
	// compacted (see Checkpoint.Compacted).
	StoreBytes  int64 `json:"store_bytes"`
	BudgetBytes int64 `json:"budget_bytes"`
}

// Transaction is a multi-step change of a sandbox's workspace, begun by
// POST /api/v1/sandboxes/{id}/history/transaction, that ends as one checkpoint (commit) or
// as if it never happened (rollback).
type Transaction struct {
	ID      string `json:"id"`
	Message string `json:"message,omitempty"`
	// Base is the checkpoint the workspace was at when the transaction began: rollback
	// goes back to it.
	Base string    `json:"base"`
	Time time.Time `json:"time"`
}

// BeginRequest is POST /api/v1/sandboxes/{id}/history/transaction. Message becomes the
// commit's checkpoint message.
type BeginRequest struct {
	Message string `json:"message,omitempty"`
}

// CommitResult answers POST …/history/transaction/commit. Created is false when the
// transaction changed nothing: Checkpoint is then the current one.
type CommitResult struct {
	Checkpoint  Checkpoint  `json:"checkpoint"`
	Created     bool        `json:"created"`
	Transaction Transaction `json:"transaction"`
}

// RollbackResult answers POST …/history/transaction/rollback: the workspace is at Current
// again, exactly as at the transaction's start, and the app was restarted on it (AppNote
// says why not).
type RollbackResult struct {
	Transaction  Transaction `json:"transaction"`
	Current      string      `json:"current"`
	AppRestarted bool        `json:"app_restarted"`
	AppNote      string      `json:"app_note,omitempty"`
}

// CheckpointRequest is POST /api/v1/sandboxes/{id}/history/checkpoints.
type CheckpointRequest struct {
	Message string `json:"message,omitempty"`
}

// CheckpointResult answers a CheckpointRequest. Created is false when nothing had changed:
// Checkpoint is then the current one.
type CheckpointResult struct {
	Checkpoint Checkpoint `json:"checkpoint"`
	Created    bool       `json:"created"`
}

// RestoreRequest is POST /api/v1/sandboxes/{id}/history/restore.
type RestoreRequest struct {
	Checkpoint string `json:"checkpoint"`
}

// RestoreResult answers undo, redo and restore. Checkpoint is the restore checkpoint that
// records what was done; Current is where undo starts from now. AppRestarted says the
// sandbox's app was restarted on the restored files; AppNote says why not.
type RestoreResult struct {
	Checkpoint   Checkpoint `json:"checkpoint"`
	Current      string     `json:"current,omitempty"`
	AppRestarted bool       `json:"app_restarted"`
	AppNote      string     `json:"app_note,omitempty"`
}

// HistoryDiff is GET /api/v1/sandboxes/{id}/history/diff?from=…&to=…: the workspace paths
// that differ from one checkpoint to the other.
type HistoryDiff struct {
	From    string   `json:"from"`
	To      string   `json:"to"`
	Added   []string `json:"added"`
	Changed []string `json:"changed"`
	Removed []string `json:"removed"`
	// Files, asked for with lines=true, is each file's line diff.
	Files []FileDiff `json:"files,omitempty"`
}

// FileDiff is one file's content change between two checkpoints: a unified diff of its
// lines (three lines of context), cut with Truncated set past 64 KiB; or Binary when
// either side is not text; or Note saying why there is no diff (too large, not a
// regular file).
type FileDiff struct {
	Path      string `json:"path"`
	Status    string `json:"status"` // added, changed or removed
	Binary    bool   `json:"binary,omitempty"`
	Unified   string `json:"unified,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
	Note      string `json:"note,omitempty"`
}

// ForkRequest is POST /api/v1/sandboxes/{id}/fork: At is the checkpoint the fork starts
// from ("": the current one, with changes not yet recorded checkpointed first; with a
// transaction open, the state before it); Name is the new sandbox's ("": the source's,
// marked as a fork).
type ForkRequest struct {
	At   string `json:"at,omitempty"`
	Name string `json:"name,omitempty"`
}

// ForkResult answers a fork: the new sandbox, the checkpoint it starts from, and a note
// when the source had a transaction open that the fork does not hold.
type ForkResult struct {
	Sandbox Sandbox `json:"sandbox"`
	From    string  `json:"from"`
	At      string  `json:"at"`
	Note    string  `json:"note,omitempty"`
	// SharedBlobs and ClonedBlobs count the history's blobs the fork shares with its
	// source by hard link and by reflink.
	SharedBlobs int `json:"shared_blobs"`
	ClonedBlobs int `json:"cloned_blobs"`
	// Workspace says how the fork's workspace was made: ForkDiskCopy or ForkFiles.
	Workspace string `json:"workspace"`
}

// How a fork's workspace is made (ForkResult.Workspace).
const (
	// ForkDiskCopy: a sparse copy of the source's disk image, the checkpoint restored over
	// it (only what differs written).
	ForkDiskCopy = "disk_copy"
	// ForkFiles: the checkpoint's files written one by one into an empty workspace.
	ForkFiles = "files"
)
