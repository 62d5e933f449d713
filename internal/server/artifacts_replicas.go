package server

import (
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
// fetches the archive from there to release it.

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

// forwardBlob sends r, a download of blob sha, to the replica that holds it when that is
// another one; it reports whether r was answered. A request that came over a hop is
// never forwarded again.
func (s *Server) forwardBlob(w http.ResponseWriter, r *http.Request, row store.ArtifactRow, sha string) bool {
	if hopOf(r) != nil {
		return false
	}
	rep, err := s.artifactHolder(r.Context(), row, sha)
	if err != nil {
		api.WriteError(w, s.log, err)
		return true
	}
	if rep == nil {
		return false
	}
	s.m.forwarded.WithLabelValues(rep.ID).Inc()
	ctx := context.WithValue(r.Context(), forwardKey{}, forwardTo{replica: *rep, what: "which stores this artifact"})
	s.cluster.forward.ServeHTTP(w, r.WithContext(ctx))
	return true
}

// openArtifact opens the archive of artifact row: here, or fetched from the replica that
// holds it, with r's own credentials (that replica checks them again).
func (s *Server) openArtifact(r *http.Request, row store.ArtifactRow) (io.ReadCloser, error) {
	rep, err := s.artifactHolder(r.Context(), row, row.SHA256)
	if err != nil {
		return nil, err
	}
	if rep == nil {
		f, err := os.Open(filepath.Join(s.blobDir(), row.SHA256))
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("artifact blob %s is missing from the data directory: %w", row.SHA256, errdefs.ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("artifact blob %s: %w", row.SHA256, err)
		}
		return f, nil
	}
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
