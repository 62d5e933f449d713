package paddock

import (
	"context"
	"net/http"
)

// BackupNow checkpoints the sandbox and backs its history up to the server's S3 store.
func (s *Sandbox) BackupNow(ctx context.Context) (Backup, error) {
	var res Backup
	err := s.c.do(ctx, "POST", s.path("backups"), nil, &res, http.StatusCreated)
	return res, err
}

// Backups lists the sandbox's backups, oldest first, then any attempt not in the store.
func (s *Sandbox) Backups(ctx context.Context) (BackupList, error) {
	var res BackupList
	err := s.c.do(ctx, "GET", s.path("backups"), nil, &res, http.StatusOK)
	return res, err
}

// RestoreBackup restores a backup into the sandbox itself or into a new one (req.Into).
func (s *Sandbox) RestoreBackup(ctx context.Context, req BackupRestoreRequest) (BackupRestoreResult, error) {
	var res BackupRestoreResult
	err := s.c.do(ctx, "POST", s.path("backups", "restore"), req, &res, http.StatusOK, http.StatusCreated)
	return res, err
}

// BackupSandboxes lists the sandboxes with backups in the server's S3 store, those its
// database does not have among them: every one for an admin, the caller's own for a user.
// It is what can be restored from the bucket.
func (c *Client) BackupSandboxes(ctx context.Context) (BackupSandboxList, error) {
	var res BackupSandboxList
	err := c.do(ctx, "GET", "/api/v1/backups", nil, &res, http.StatusOK)
	return res, err
}

// PruneBackups runs the backups' retention now, over one sandbox's backups or (an admin's)
// every sandbox's; with DryRun it deletes nothing and says what it would.
func (c *Client) PruneBackups(ctx context.Context, req BackupPruneRequest) (BackupPruneResult, error) {
	var res BackupPruneResult
	err := c.do(ctx, "POST", "/api/v1/backups/prune", req, &res, http.StatusOK)
	return res, err
}
