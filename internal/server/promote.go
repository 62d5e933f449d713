package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/store"
)

// packageMessage is the message of the checkpoint a package step commits (atomically).
const packageMessage = "paddock app package"

// promote is POST /api/v1/promote. A swap exchanges the live and dev pointers; a release
// unpacks dev's packaged build into live and leaves dev as it is, so live serves the
// build while dev keeps its dev server. Auto releases when dev runs a provider's dev
// server and has an artifact, and swaps otherwise.
func (s *Server) promote(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	req, err := decodePromote(w, r)
	if err != nil {
		return err
	}
	mode := req.Mode
	var pick artifactPick
	if mode != api.PromoteSwap {
		_, dev, _, err := s.fleet.Roles(r.Context(), c)
		if err != nil {
			return err
		}
		if pick, err = s.devArtifact(r.Context(), c, dev); err != nil {
			return err
		}
		switch {
		case mode == api.PromoteRelease && pick.row.SHA256 == "":
			return fmt.Errorf("no artifact packaged from the dev sandbox %s: run paddock app package: %w", dev.ID, errdefs.ErrFailedPrecondition)
		case mode == api.PromoteAuto && (dev.App.Provider == "" || pick.row.SHA256 == ""):
			mode = api.PromoteSwap
		default:
			mode = api.PromoteRelease
		}
	}
	if mode == api.PromoteSwap {
		live, dev, gen, err := s.fleet.Promote(r.Context(), c)
		if err != nil {
			return err
		}
		s.writeRoles(w, api.Roles{Live: s.toAPI(live, api.RoleLive), Dev: s.toAPI(dev, api.RoleDev), Generation: gen, Mode: mode})
		return nil
	}
	live, err := s.release(w, r, c, pick.row)
	if err != nil {
		return err
	}
	_, dev, gen, err := s.fleet.Roles(r.Context(), c)
	if err != nil {
		return err
	}
	detail := map[string]any{"mode": mode, "live": live.ID, "dev": dev.ID, "generation": gen, "artifact": pick.row.SHA256, "current": pick.note == ""}
	if err := s.st.Audit(context.WithoutCancel(r.Context()), store.AuditEvent{At: time.Now(), ActorUserID: c.UserID, Action: "roles.promote", Target: c.UserID, Detail: detail}); err != nil {
		s.log.Warn("record event", "action", "roles.promote", "err", err)
	}
	s.log.Info("promoted", "user", c.Username, "mode", mode, "live", live.ID, "artifact", pick.row.SHA256)
	s.writeRoles(w, api.Roles{Live: s.toAPI(live, api.RoleLive), Dev: s.toAPI(dev, api.RoleDev), Generation: gen,
		Mode: mode, Artifact: pick.row.SHA256, Note: pick.note})
	return nil
}

// decodePromote reads a promotion request (an empty body is auto) and leaves the body
// readable again, for a release forwarded to live's replica.
func decodePromote(w http.ResponseWriter, r *http.Request) (api.PromoteRequest, error) {
	req := api.PromoteRequest{Mode: api.PromoteAuto}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<12))
	if err != nil {
		return req, fmt.Errorf("request body: %w", errdefs.ErrInvalidArgument)
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	if len(bytes.TrimSpace(b)) > 0 {
		if err := api.DecodeJSON(w, r, &req, 1<<12); err != nil {
			return req, err
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	switch req.Mode {
	case "":
		req.Mode = api.PromoteAuto
	case api.PromoteAuto, api.PromoteSwap, api.PromoteRelease:
	default:
		return req, fmt.Errorf("mode %q: want auto, swap or release: %w", req.Mode, errdefs.ErrInvalidArgument)
	}
	return req, nil
}

// artifactPick is the artifact a release promotion ships, and a note when it is not
// dev's current code.
type artifactPick struct {
	row  store.ArtifactRow
	note string
}

// devArtifact picks the caller's artifact packaged from sandbox dev: the newest one built
// from dev's current checkpoint, else the newest with a note saying dev changed since. No
// artifact is an empty pick.
func (s *Server) devArtifact(ctx context.Context, c fleet.Caller, dev store.Sandbox) (artifactPick, error) {
	rows, err := s.st.ListArtifacts(ctx, c.UserID)
	if err != nil {
		return artifactPick{}, err
	}
	var mine []store.ArtifactRow
	for _, row := range rows {
		if row.SandboxID == dev.ID {
			mine = append(mine, row)
		}
	}
	if len(mine) == 0 {
		return artifactPick{}, nil
	}
	h, err := s.ops.History(ctx, c, dev.ID)
	if err != nil {
		// Without dev's history (the process tier keeps none) what is current is unknown.
		s.log.Info("promote: dev's history", "sandbox", dev.ID, "err", err)
		return artifactPick{row: mine[0], note: fmt.Sprintf("cannot tell whether artifact %s holds dev's latest changes (%v)", mine[0].SHA256[:12], err)}, nil
	}
	current := currentSources(h)
	for _, row := range mine {
		var m api.ArtifactManifest
		if err := json.Unmarshal([]byte(row.Manifest), &m); err != nil {
			return artifactPick{}, fmt.Errorf("artifact %s: manifest: %w", row.SHA256, err)
		}
		if m.Checkpoint != "" && current[m.Checkpoint] {
			return artifactPick{row: row}, nil
		}
	}
	return artifactPick{row: mine[0], note: fmt.Sprintf("artifact %s was packaged before dev's latest changes (dev is at checkpoint %s): run paddock app package, then promote again, to ship them",
		mine[0].SHA256[:12], h.Current)}, nil
}

// currentSources are the checkpoints an artifact of the workspace as it is now was built
// from: the current one, and the one before it when the current is the package step's
// own commit.
func currentSources(h api.History) map[string]bool {
	out := map[string]bool{}
	if h.Current == "" {
		return out
	}
	out[h.Current] = true
	for _, cp := range h.Checkpoints {
		if cp.ID == h.Current && cp.Message == packageMessage && cp.Parent != "" {
			out[cp.Parent] = true
		}
	}
	return out
}
