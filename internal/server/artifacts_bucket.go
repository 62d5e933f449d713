package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/sandboxops"
	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/wsbackup"
)

// With a backup store, each artifact's bytes (its archive and its SBOM) have a second
// copy there, sealed like the backups (package wsbackup), uploaded once the package step
// has stored them and tried again with backoff while the store fails. The artifact's
// record says how far its copy got. A replica that starts uploads the copies of the
// artifacts it holds that the store lacks: those cut short, and those packaged before it
// had a store.

// artifactCopies are the uploads of artifacts' copies under way.
type artifactCopies struct {
	mu     sync.Mutex // guards ctx and wg.Add against stop
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// bytes is held by an upload's attempt and by a delete of bytes: a copy deleted is
	// never uploaded again by an attempt that had begun.
	bytes sync.Mutex
}

// startArtifactCopies starts the uploads of the copies this replica's artifacts lack.
func (s *Server) startArtifactCopies(ctx context.Context) {
	if s.backups == nil {
		return
	}
	s.copies.mu.Lock()
	s.copies.ctx, s.copies.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.copies.mu.Unlock()
	s.goCopy(func(ctx context.Context) {
		rows, err := s.st.ArtifactsToCopy(ctx, s.fleet.Replica())
		if err != nil {
			s.log.Warn("artifact copies: list those the backup store lacks", "err", err)
			return
		}
		for _, r := range rows {
			if ctx.Err() != nil {
				return
			}
			s.copyArtifact(ctx, r.SHA256, r.SBOMSHA256)
		}
	})
}

// goCopy runs fn in a goroutine that stopArtifactCopies ends and waits for.
func (s *Server) goCopy(fn func(context.Context)) {
	s.copies.mu.Lock()
	defer s.copies.mu.Unlock()
	if s.copies.ctx == nil || s.copies.ctx.Err() != nil {
		return
	}
	ctx := s.copies.ctx
	s.copies.wg.Add(1)
	go func() {
		defer s.copies.wg.Done()
		fn(ctx)
	}()
}

func (s *Server) stopArtifactCopies() {
	s.copies.mu.Lock()
	cancel := s.copies.cancel
	s.copies.mu.Unlock()
	if cancel != nil {
		cancel()
		s.copies.wg.Wait()
	}
}

// queueArtifactCopy starts the upload of the copy of artifact sha and its SBOM.
func (s *Server) queueArtifactCopy(sha, sbom string) {
	if s.backups == nil {
		return
	}
	s.goCopy(func(ctx context.Context) { s.copyArtifact(ctx, sha, sbom) })
}

// copyArtifact uploads the copy of artifact sha and its SBOM, trying again with backoff
// while the store is down or failing, and records how it went. Cut short by the server's
// end, it is left retrying: the next start resumes it.
func (s *Server) copyArtifact(ctx context.Context, sha, sbom string) {
	b := s.backups
	pause := b.Backoff
	for attempt := 1; ; attempt++ {
		err := s.uploadArtifact(ctx, sha, sbom)
		if err != nil && ctx.Err() != nil {
			return
		}
		state, msg, retry := store.BucketStored, "", false
		if err != nil {
			retry = b.Retryable(err, attempt)
			state, msg = store.BucketFailed, errdefs.Clip(err.Error(), 500)
			if retry {
				state = store.BucketRetrying
			}
		}
		if err := s.st.SetArtifactBucket(ctx, sha, state, msg); err != nil {
			s.log.Warn("artifact copy: record its state", "artifact", sha, "state", state, "err", err)
		}
		switch {
		case err == nil:
			s.log.Info("artifact copied to the backup store", "artifact", sha, "attempts", attempt)
			return
		case !retry:
			s.log.Warn("artifact copy failed", "artifact", sha, "attempts", attempt, "err", err)
			return
		}
		s.log.Warn("artifact copy: the store failed; trying again", "artifact", sha, "attempt", attempt, "pause", pause, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = sandboxops.NextPause(pause)
	}
}

// uploadArtifact uploads the copies of blobs sha (an archive) and sbom, read from the
// data dir.
func (s *Server) uploadArtifact(ctx context.Context, sha, sbom string) error {
	s.copies.bytes.Lock()
	defer s.copies.bytes.Unlock()
	for _, blob := range []string{sha, sbom} {
		b, err := os.ReadFile(filepath.Join(s.blobDir(), blob))
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("artifact %s: blob %s is not in this replica's data directory (deleted, or lost): %w", sha[:12], blob, errdefs.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("artifact %s: %w", sha[:12], err)
		}
		if _, err := wsbackup.PutArtifact(ctx, s.backups.Target, s.backups.Key, blob, b); err != nil {
			return fmt.Errorf("artifact %s: %w", sha[:12], err)
		}
	}
	return nil
}

// fromBucket is blob sha of artifact row read from its copy in the backup store, which
// must open under the backup key and hash to sha. why is why the bytes are neither here
// nor at their replica (nil: they are missing); it is the answer when there is no store,
// or no copy.
func (s *Server) fromBucket(ctx context.Context, row store.ArtifactRow, sha string, why error) ([]byte, error) {
	if why == nil {
		why = fmt.Errorf("artifact blob %s is missing from the data directory: %w", sha, errdefs.ErrNotFound)
	}
	if s.backups == nil {
		return nil, why
	}
	blob, err := wsbackup.GetArtifact(ctx, s.backups.Target, s.backups.Key, sha)
	switch {
	case err == nil:
		s.log.Info("artifact served from the backup store", "artifact", row.SHA256, "blob", sha)
		return blob, nil
	case errors.Is(err, errdefs.ErrNotFound):
		kind := errdefs.ErrNotFound
		if errors.Is(why, errdefs.ErrUnavailable) {
			kind = errdefs.ErrUnavailable
		}
		return nil, fmt.Errorf("%s; the backup store has no copy of it (%s): %w", reason(why), reason(err), kind)
	case errors.Is(err, errdefs.ErrDataLoss):
		// A tampered or damaged copy is refused by name; its bytes are never served.
		return nil, fmt.Errorf("%s; the artifact's copy in the backup store is refused: %s: %w", reason(why), reason(err), errdefs.ErrUnavailable)
	}
	return nil, fmt.Errorf("%s; the backup store, asked for the artifact's copy, did not answer: %s: %w", reason(why), reason(err), errdefs.ErrUnavailable)
}

// reason is err's message without the taxonomy's word at its end.
func reason(err error) string {
	msg := err.Error()
	for _, kind := range []error{errdefs.ErrNotFound, errdefs.ErrUnavailable, errdefs.ErrDataLoss} {
		msg = strings.TrimSuffix(msg, ": "+kind.Error())
	}
	return msg
}

// deleteArtifact is DELETE /api/v1/artifacts/{artifact}: the caller's artifact goes, and
// with it the bytes (here and in the backup store) that no artifact names any longer. The
// replica that holds the bytes deletes it, when it answers; else this one does, and the
// bytes in that replica's data dir stay there.
func (s *Server) deleteArtifact(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	row, err := s.callerArtifact(r, c)
	if err != nil {
		return err
	}
	if hopOf(r) == nil {
		if rep, _ := s.artifactHolder(r.Context(), row, row.SHA256); rep != nil {
			s.m.forwarded.WithLabelValues(rep.ID).Inc()
			to := forwardTo{replica: *rep, what: "which stores this artifact", fallback: func(w http.ResponseWriter, why error) {
				s.log.Warn("delete artifact: its replica did not answer; deleting it here", "artifact", row.SHA256, "err", why)
				if err := s.deleteArtifactHere(w, r, c, row); !errors.Is(err, errResponded) {
					api.WriteError(w, s.log, err)
				}
			}}
			s.cluster.forward.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), forwardKey{}, to)))
			return errResponded
		}
	}
	return s.deleteArtifactHere(w, r, c, row)
}

// deleteArtifactHere deletes artifact row of c's, its copies in the backup store, and its
// bytes in this replica's data dir, when no artifact names them any longer.
func (s *Server) deleteArtifactHere(w http.ResponseWriter, r *http.Request, c fleet.Caller, row store.ArtifactRow) error {
	s.copies.bytes.Lock()
	defer s.copies.bytes.Unlock()
	// The store's copies go first: one the store fails to delete leaves the artifact as
	// it was, to be deleted again.
	if s.backups != nil {
		for _, blob := range []string{row.SHA256, row.SBOMSHA256} {
			n, err := s.st.ArtifactBlobUsers(r.Context(), blob)
			if err != nil {
				return err
			}
			if n > 1 {
				continue // another artifact (another user's) names these bytes
			}
			if err := wsbackup.DeleteArtifact(r.Context(), s.backups.Target, s.backups.Key, blob); err != nil {
				return fmt.Errorf("delete artifact %s: its copy in the backup store: %w", row.SHA256[:12], err)
			}
		}
	}
	_, unused, err := s.st.DeleteArtifact(r.Context(), c.UserID, row.SHA256)
	if err != nil {
		return err
	}
	for _, blob := range unused {
		if err := os.Remove(filepath.Join(s.blobDir(), blob)); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("delete artifact: remove its bytes", "artifact", row.SHA256, "blob", blob, "err", err)
		}
	}
	s.log.Info("artifact deleted", "user", c.UserID, "artifact", row.SHA256, "blobs_freed", len(unused))
	w.WriteHeader(http.StatusNoContent)
	return errResponded
}
