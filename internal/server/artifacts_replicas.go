package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store"
)

// An artifact's bytes stay in the data dir of the replica that packaged it; its record,
// in the database, names that replica. Another replica forwards a download there, and
// fetches the archive from there to release it. With a backup store, a copy of the bytes
// is there too (artifacts_bucket.go): what is served when the replica is not.

// artifactHolder is the replica that holds blob sha of artifact row when this one does
// not: nil when the bytes are here, or no other replica is known to hold them (the
// caller then says they are missing). A holder that is dead is an error naming it.
func (s *Server) artifactHolder(ctx context.Context, row store.ArtifactRow, sha string) (*store.Replica, error) {
	c := s.cluster
	if c == nil || row.Replica == "" || row.Replica == c.id {
		return nil, nil
	}
	if _, err := os.Stat(filepath.Join(s.blobDir(), sha)); err == nil {
		return nil, nil
	}
	rep, err := s.st.ReplicaByID(ctx, row.Replica)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if time.Since(rep.HeartbeatAt) > c.ttl {
		return nil, fmt.Errorf("artifact %s is stored on replica %s, which has not been heard from since %s: it can be downloaded once that replica is back: %w",
			row.SHA256[:12], rep.ID, rep.HeartbeatAt.UTC().Format(time.RFC3339), errdefs.ErrUnavailable)
	}
	return &rep, nil
}

// sendBlob answers r, a download of blob sha of artifact row: from this replica's data
// dir when it holds the bytes, else from the replica that does (forwarded), else from the
// backup store's copy.
func (s *Server) sendBlob(w http.ResponseWriter, r *http.Request, row store.ArtifactRow, sha, contentType, filename string) error {
	f, err := os.Open(filepath.Join(s.blobDir(), sha))
	if err == nil {
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return fmt.Errorf("artifact blob %s: %w", sha, err)
		}
		serveArtifact(w, r, f, st.ModTime(), sha, contentType, filename)
		return errResponded
	}
	if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("artifact blob %s: %w", sha, err)
	}
	fromBucket := func(w http.ResponseWriter, why error) error {
		blob, err := s.fromBucket(r.Context(), row, sha, why)
		if err != nil {
			return err
		}
		serveArtifact(w, r, bytes.NewReader(blob), row.CreatedAt, sha, contentType, filename)
		return errResponded
	}
	if hopOf(r) != nil { // the replica that forwarded r found no holder but this one
		return fromBucket(w, nil)
	}
	rep, why := s.artifactHolder(r.Context(), row, sha)
	if rep == nil {
		return fromBucket(w, why)
	}
	s.m.forwarded.WithLabelValues(rep.ID).Inc()
	to := forwardTo{replica: *rep, what: "which stores this artifact"}
	if s.backups != nil {
		to.fallback = func(w http.ResponseWriter, why error) {
			if err := fromBucket(w, why); !errors.Is(err, errResponded) {
				api.WriteError(w, s.log, err)
			}
		}
	}
	s.cluster.forward.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), forwardKey{}, to)))
	return errResponded
}

// serveArtifact answers r with an artifact's blob sha, read from rd.
func serveArtifact(w http.ResponseWriter, r *http.Request, rd io.ReadSeeker, mod time.Time, sha, contentType, filename string) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", filename))
	h.Set("ETag", `"sha256:`+sha+`"`)
	h.Set("Cache-Control", "private, immutable")
	http.ServeContent(w, r, "", mod, rd)
}

// openArtifact opens the archive of artifact row: here, or fetched from the replica that
// holds it, with r's own credentials (that replica checks them again), or else from the
// backup store's copy.
func (s *Server) openArtifact(r *http.Request, row store.ArtifactRow) (io.ReadCloser, error) {
	f, err := os.Open(filepath.Join(s.blobDir(), row.SHA256))
	if err == nil {
		return f, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("artifact blob %s: %w", row.SHA256, err)
	}
	rep, why := s.artifactHolder(r.Context(), row, row.SHA256)
	if rep != nil {
		rd, err := s.fetchFromReplica(r, row, *rep)
		if err == nil || !errors.Is(err, errdefs.ErrUnavailable) {
			return rd, err
		}
		why = err
	}
	blob, err := s.fromBucket(r.Context(), row, row.SHA256, why)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(blob)), nil
}

// fetchFromReplica fetches the archive of artifact row from replica rep, which holds it.
func (s *Server) fetchFromReplica(r *http.Request, row store.ArtifactRow, rep store.Replica) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(r.Context(), "GET", "http://"+rep.Advertise+"/api/v1/artifacts/"+row.SHA256+"/archive", nil)
	if err != nil {
		return nil, fmt.Errorf("artifact %s on replica %s: %w", row.SHA256[:12], rep.ID, err)
	}
	for _, h := range []string{"Authorization", "Cookie"} {
		if v := r.Header.Values(h); len(v) > 0 {
			req.Header[h] = v
		}
	}
	resp, err := s.cluster.hopClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("replica %s (%s), which stores artifact %s, did not answer: %w: %w", rep.ID, rep.Advertise, row.SHA256[:12], errdefs.ErrUnavailable, err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp.Body, nil
	}
	defer resp.Body.Close()
	var e api.Error
	_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&e)
	kind := errdefs.ErrUnavailable
	if resp.StatusCode == http.StatusNotFound {
		kind = errdefs.ErrNotFound
	}
	return nil, fmt.Errorf("artifact %s from replica %s: %d %s: %w", row.SHA256[:12], rep.ID, resp.StatusCode, errdefs.Clip(e.Error.Message, 200), kind)
}
