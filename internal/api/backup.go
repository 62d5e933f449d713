package api

import (
	"fmt"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// BackupIDFormat is a backup's ID: its time, as its manifest is named.
const BackupIDFormat = "20060102T150405.000000000Z"

// ParseBackupID is the time of backup ID id; anything else is an invalid argument naming it.
func ParseBackupID(id string) (time.Time, error) {
	at, err := time.Parse(BackupIDFormat, id)
	if err != nil || at.Format(BackupIDFormat) != id {
		return time.Time{}, fmt.Errorf("backup %q: not a backup ID (like 20260102T150405.000000000Z): %w", id, errdefs.ErrInvalidArgument)
	}
	return at, nil
}

// Backup states.
const (
	BackupDone     = "done"     // in the bucket
	BackupRunning  = "running"  // uploading
	BackupRetrying = "retrying" // the store failed; trying again after a pause
	BackupFailed   = "failed"   // given up after its attempts; nothing was recorded
	BackupDamaged  = "damaged"  // in the bucket, but its manifest is missing or fails authentication
)

// Backup is one backup of a sandbox's workspace history to the configured S3 store. ID is
// its time as the store names it (give it to restore); Checkpoint is the checkpoint it
// holds as current; UploadedBytes counts what it uploaded (the rest was there already;
// a listing counts the blobs, without the manifest itself).
// A backup still running, retrying or failed has no ID; Error says why it failed.
type Backup struct {
	ID            string    `json:"id,omitempty"`
	Time          time.Time `json:"time"`
	State         string    `json:"state"`
	Checkpoint    string    `json:"checkpoint,omitempty"`
	Blobs         int       `json:"blobs"`
	UploadedBlobs int       `json:"uploaded_blobs"`
	UploadedBytes int64     `json:"uploaded_bytes"`
	Attempts      int       `json:"attempts,omitempty"`
	Error         string    `json:"error,omitempty"`
}

// BackupList is a sandbox's backups, oldest first, then any attempt not in the store.
// StoreError says why the store could not be listed (it is down): Backups then holds
// only the attempts this server knows of.
type BackupList struct {
	Backups    []Backup `json:"backups"`
	StoreError string   `json:"store_error,omitempty"`
}

// BackupRestoreRequest restores a backup: Backup names one by ID, or At picks the newest
// at or before a time (RFC 3339); neither: the newest. Into is "same" (default: the
// sandbox's own history and workspace) or a new sandbox's name.
type BackupRestoreRequest struct {
	Backup string    `json:"backup,omitempty"`
	At     time.Time `json:"at,omitzero"`
	Into   string    `json:"into,omitempty"`
}

// BackupRestoreResult says what was restored: the backup, into which sandbox (a new one
// is given whole), and the checkpoint its workspace is now at.
type BackupRestoreResult struct {
	Backup     string   `json:"backup"`
	Sandbox    string   `json:"sandbox"`
	Checkpoint string   `json:"checkpoint"`
	New        *Sandbox `json:"new,omitempty"`
}

// BackupSandbox is a sandbox whose backups the store holds, as its newest backup's record
// tells it: what a server that lost its database can restore. Known says whether this
// server's database has the sandbox; Error why the newest manifest could not be read (a
// wrong key names the object that failed authentication).
type BackupSandbox struct {
	ID      string    `json:"id"`
	Name    string    `json:"name,omitempty"`
	Owner   string    `json:"owner,omitempty"`
	Backups int       `json:"backups"`
	Newest  string    `json:"newest"`
	Time    time.Time `json:"time"`
	Known   bool      `json:"known"`
	Error   string    `json:"error,omitempty"`
}

// BackupSandboxList is every sandbox with backups in the store.
type BackupSandboxList struct {
	Sandboxes []BackupSandbox `json:"sandboxes"`
}

// BackupPruneRequest runs the backups' retention now: over one sandbox's backups, or
// (an admin's) every sandbox's; DryRun deletes nothing.
type BackupPruneRequest struct {
	Sandbox string `json:"sandbox,omitempty"`
	DryRun  bool   `json:"dry_run,omitempty"`
}

// BackupRef names one backup of a sandbox.
type BackupRef struct {
	Sandbox string `json:"sandbox"`
	Backup  string `json:"backup"`
}

// BackupPruneResult is what a retention pass deleted (or, dry, would delete): the backups
// dropped, and the blobs no kept backup names, with their bytes in the store.
type BackupPruneResult struct {
	DryRun  bool        `json:"dry_run"`
	Kept    int         `json:"kept"`
	Dropped []BackupRef `json:"dropped"`
	Blobs   int         `json:"blobs"`
	Bytes   int64       `json:"bytes"`
}
