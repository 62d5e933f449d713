package server

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/artifact"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/provider"
	"github.com/paddockhq/paddock/internal/store"
)

// toolchains are the commands whose output is a runtime's tool versions, for the manifest.
var toolchains = map[string]map[string][]string{
	"node": {"node": {"node", "--version"}, "npm": {"npm", "--version"}},
	"go":   {"go": {"go", "env", "GOVERSION"}},
	"rust": {"rustc": {"rustc", "--version"}, "cargo": {"cargo", "--version"}},
}

// blobDir is where artifacts and SBOMs are stored, each under its SHA-256.
func (s *Server) blobDir() string { return filepath.Join(s.cfg.Runner.DataDir, "artifacts", "sha256") }

// putBlob stores b under its SHA-256 (written whole, then renamed into place) and
// returns the digest.
func (s *Server) putBlob(b []byte) (string, error) {
	sum := sha256.Sum256(b)
	sha := hex.EncodeToString(sum[:])
	dir := s.blobDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("store artifact: %w", err)
	}
	dst := filepath.Join(dir, sha)
	if _, err := os.Stat(dst); err == nil {
		return sha, nil
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return "", fmt.Errorf("store artifact: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return "", fmt.Errorf("store artifact: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", fmt.Errorf("store artifact: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("store artifact: %w", err)
	}
	if err := os.Rename(f.Name(), dst); err != nil {
		return "", fmt.Errorf("store artifact: %w", err)
	}
	return sha, nil
}

// limitBuffer collects bytes up to a limit and refuses more.
type limitBuffer struct {
	b     []byte
	limit int
}

var errTooLarge = errors.New("too large")

func (l *limitBuffer) Write(p []byte) (int, error) {
	if len(l.b)+len(p) > l.limit {
		return 0, errTooLarge
	}
	l.b = append(l.b, p...)
	return len(p), nil
}

// readWorkspace reads a file of the sandbox's workspace up to limit bytes; a missing file
// is errdefs.ErrNotFound.
func (s *Server) readWorkspace(ctx context.Context, c fleet.Caller, id, p string, limit int) ([]byte, error) {
	d, err := s.ops.ReadFile(ctx, c, id, p)
	if err != nil {
		return nil, err
	}
	buf := &limitBuffer{limit: limit}
	if _, err := d.WriteTo(buf); err != nil {
		if errors.Is(err, errTooLarge) {
			return nil, fmt.Errorf("%s is larger than %d bytes: %w", p, limit, errdefs.ErrFailedPrecondition)
		}
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	return buf.b, nil
}

// collectArtifact stores a package step's archive with its manifest and SBOM, and records
// it as the caller's.
func (s *Server) collectArtifact(ctx context.Context, run execRunner, p provider.Project, archive, checkpoint string) (string, error) {
	id := run.r.PathValue("id")
	b, err := s.readWorkspace(ctx, run.c, id, archive, artifact.MaxArchiveBytes)
	if err != nil {
		return "", err
	}
	files, err := artifact.Files(b)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	m := artifact.Manifest{Runtime: p.Runtime, Dir: p.Dir, Checkpoint: checkpoint, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(b)), Files: files}
	for tool, argv := range toolchains[p.Runtime] {
		res, err := run.Run(ctx, p.Dir, provider.Command{Name: tool + " version", Argv: argv, Timeout: time.Minute})
		if err == nil && res.ExitCode == 0 {
			if m.Toolchain == nil {
				m.Toolchain = map[string]string{}
			}
			m.Toolchain[tool] = strings.TrimSpace(string(res.Stdout))
		}
	}
	var comps []artifact.Component
	if name, parse := artifact.Lockfile(p.Runtime); parse != nil {
		lf := path.Join(p.Dir, name)
		lb, err := s.readWorkspace(ctx, run.c, id, lf, 32<<20)
		switch {
		case errors.Is(err, errdefs.ErrNotFound):
		case err != nil:
			return "", err
		default:
			if comps, err = parse(lb); err != nil {
				return "", fmt.Errorf("%s: %w", lf, err)
			}
			m.Lockfile = name
		}
	}
	name := path.Base(p.Dir)
	if p.Dir == "." {
		name = p.Runtime
	}
	sbom, err := artifact.SBOM(m, name, comps)
	if err != nil {
		return "", err
	}
	mb, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("manifest: %w", err)
	}
	sha, err := s.putBlob(b)
	if err != nil {
		return "", err
	}
	sbomSHA, err := s.putBlob(sbom)
	if err != nil {
		return "", err
	}
	row := store.ArtifactRow{UserID: run.c.UserID, SHA256: sha, SandboxID: id, Runtime: p.Runtime, Dir: p.Dir,
		Size: int64(len(b)), SBOMSHA256: sbomSHA, Manifest: string(mb), CreatedAt: time.Now(), Replica: s.fleet.Replica()}
	if s.backups != nil {
		row.Bucket = store.BucketPending
	}
	if err := s.st.PutArtifact(ctx, row); err != nil {
		return "", err
	}
	s.queueArtifactCopy(sha, sbomSHA)
	s.log.Info("artifact stored", "user", run.c.UserID, "sandbox", id, "artifact", sha, "runtime", p.Runtime, "bytes", len(b), "components", len(comps))
	return sha, nil
}

func apiArtifact(r store.ArtifactRow) api.Artifact {
	a := api.Artifact{ID: r.SHA256, SandboxID: r.SandboxID, Runtime: r.Runtime, Dir: r.Dir, Size: r.Size, SBOM: r.SBOMSHA256, CreatedAt: r.CreatedAt,
		Replica: r.Replica, Copies: []string{api.ArtifactCopyLocal}, Bucket: r.Bucket, BucketError: r.BucketError}
	if r.Bucket == store.BucketStored {
		a.Copies = append(a.Copies, api.ArtifactCopyBucket)
	}
	return a
}

var artifactID = regexp.MustCompile(`^[0-9a-f]{64}$`)

// callerArtifact is the caller's artifact named in the path; another user's is not found.
func (s *Server) callerArtifact(r *http.Request, c fleet.Caller) (store.ArtifactRow, error) {
	id := r.PathValue("artifact")
	if !artifactID.MatchString(id) {
		return store.ArtifactRow{}, fmt.Errorf("artifact id %q: want the archive's SHA-256 in lower-case hex (64 digits): %w", id, errdefs.ErrInvalidArgument)
	}
	return s.st.Artifact(r.Context(), c.UserID, id)
}

// listArtifacts is GET /api/v1/artifacts: the caller's artifacts, newest first.
func (s *Server) listArtifacts(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	rows, err := s.st.ListArtifacts(r.Context(), c.UserID)
	if err != nil {
		return err
	}
	out := api.ArtifactList{Artifacts: make([]api.Artifact, 0, len(rows))}
	for _, row := range rows {
		out.Artifacts = append(out.Artifacts, apiArtifact(row))
	}
	api.WriteJSON(w, http.StatusOK, out)
	return nil
}

// getArtifact is GET /api/v1/artifacts/{artifact}: one artifact with its manifest.
func (s *Server) getArtifact(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	row, err := s.callerArtifact(r, c)
	if err != nil {
		return err
	}
	a := apiArtifact(row)
	var m api.ArtifactManifest
	if err := json.Unmarshal([]byte(row.Manifest), &m); err != nil {
		return fmt.Errorf("artifact %s: manifest: %w", row.SHA256, err)
	}
	a.Manifest = &m
	api.WriteJSON(w, http.StatusOK, a)
	return nil
}

// downloadArtifact is GET /api/v1/artifacts/{artifact}/archive: the archive itself.
func (s *Server) downloadArtifact(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	row, err := s.callerArtifact(r, c)
	if err != nil {
		return err
	}
	return s.sendBlob(w, r, row, row.SHA256, "application/gzip", fmt.Sprintf("%s-%s.tar.gz", row.Runtime, row.SHA256[:12]))
}

// artifactSBOM is GET /api/v1/artifacts/{artifact}/sbom: its CycloneDX SBOM.
func (s *Server) artifactSBOM(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	row, err := s.callerArtifact(r, c)
	if err != nil {
		return err
	}
	return s.sendBlob(w, r, row, row.SBOMSHA256, "application/vnd.cyclonedx+json", fmt.Sprintf("%s-%s.cdx.json", row.Runtime, row.SHA256[:12]))
}

// releaseArtifact is POST /api/v1/artifacts/{artifact}/release: the caller's live sandbox
// serves the artifact (see release); the dev sandbox is left as it is.
func (s *Server) releaseArtifact(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	row, err := s.callerArtifact(r, c)
	if err != nil {
		return err
	}
	sb, err := s.release(w, r, c, row)
	if err != nil {
		return err
	}
	return s.writeSandbox(w, r, http.StatusOK, sb)
}

// release makes c's live sandbox serve artifact row: the archive is unpacked into the live
// workspace under .paddock/release/ID and made its app (a Go binary with PORT, `npm start`
// for a Node project packaged whole, a file server otherwise). When live runs on another
// replica, r is forwarded there and release returns errResponded.
func (s *Server) release(w http.ResponseWriter, r *http.Request, c fleet.Caller, row store.ArtifactRow) (store.Sandbox, error) {
	var m api.ArtifactManifest
	if err := json.Unmarshal([]byte(row.Manifest), &m); err != nil {
		return store.Sandbox{}, fmt.Errorf("artifact %s: manifest: %w", row.SHA256, err)
	}
	live, _, _, err := s.fleet.Roles(r.Context(), c)
	if err != nil {
		return store.Sandbox{}, err
	}
	// The live sandbox's replica releases into it, fetching the archive if need be.
	if s.forwardIfElsewhere(w, r, live.ID, "", false) {
		return store.Sandbox{}, errResponded
	}
	f, err := s.openArtifact(r, row)
	if err != nil {
		return store.Sandbox{}, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("artifact %s: %w", row.SHA256, err)
	}
	dir := path.Join(".paddock", "release", row.SHA256[:12])
	if _, err := s.ops.PutArchive(r.Context(), c, live.ID, dir, zr); err != nil {
		return store.Sandbox{}, fmt.Errorf("release %s into %s: %w", row.SHA256[:12], live.ID, err)
	}
	files := make([]string, 0, len(m.Files))
	for _, f := range m.Files {
		files = append(files, f.Path)
	}
	pv := provider.Release(row.Runtime, dir, files, provider.PreviewPort)
	sb, err := s.serveApp(r.Context(), c, live.ID, "", pv, "the release")
	if err != nil {
		return sb, fmt.Errorf("release %s: %w", row.SHA256[:12], err)
	}
	s.log.Info("artifact released", "user", c.UserID, "sandbox", live.ID, "artifact", row.SHA256, "command", strings.Join(pv.Command, " "))
	return sb, nil
}
