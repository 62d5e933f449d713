package server

import (
	"net/http"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/fleet"
)

// backupNow answers 201 with the backup made (a checkpoint first, then the upload).
func (s *Server) backupNow(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	out, err := s.ops.BackupNow(r.Context(), c, r.PathValue("id"))
	return writeOr(w, http.StatusCreated, out, err)
}

// listBackups answers the sandbox's backups, with the state of those not in the store.
func (s *Server) listBackups(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	out, err := s.ops.ListBackups(r.Context(), c, r.PathValue("id"))
	return writeOr(w, http.StatusOK, out, err)
}

// restoreBackup answers 200 with what was restored, 201 with the new sandbox when the
// backup went into one.
func (s *Server) restoreBackup(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	var req api.BackupRestoreRequest
	if err := api.DecodeJSON(w, r, &req, maxHistoryBody); err != nil {
		return err
	}
	out, sb, err := s.ops.RestoreBackup(r.Context(), c, r.PathValue("id"), req)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if sb != nil {
		n := s.toAPI(*sb, "")
		out.New = &n
		status = http.StatusCreated
		w.Header().Set("Location", "/api/v1/sandboxes/"+sb.ID)
	}
	api.WriteJSON(w, status, out)
	return nil
}

// backupSandboxes answers every sandbox with backups in the store (admins only).
func (s *Server) backupSandboxes(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	out, err := s.ops.BackupSandboxes(r.Context(), c)
	return writeOr(w, http.StatusOK, out, err)
}

// pruneBackups runs the backups' retention now and answers what it removed (or, dry,
// would remove).
func (s *Server) pruneBackups(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	var req api.BackupPruneRequest
	if err := api.DecodeJSON(w, r, &req, maxHistoryBody); err != nil {
		return err
	}
	out, err := s.ops.PruneBackups(r.Context(), c, req)
	return writeOr(w, http.StatusOK, out, err)
}
