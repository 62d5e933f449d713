package paddock

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/paddockhq/paddock/internal/api"
)

// Artifacts' shapes: a stored package and its manifest.
type (
	// Artifact is a packaged build the server stores, named by its archive's SHA-256.
	Artifact = api.Artifact
	// ArtifactManifest says what an artifact is made of and from.
	ArtifactManifest = api.ArtifactManifest
)

// Artifacts lists the caller's artifacts, newest first.
func (c *Client) Artifacts(ctx context.Context) ([]Artifact, error) {
	var out api.ArtifactList
	if err := c.do(ctx, "GET", "/api/v1/artifacts", nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return out.Artifacts, nil
}

// Artifact is one of the caller's artifacts, with its manifest.
func (c *Client) Artifact(ctx context.Context, id string) (Artifact, error) {
	var out Artifact
	err := c.do(ctx, "GET", "/api/v1/artifacts/"+url.PathEscape(id), nil, &out, http.StatusOK)
	return out, err
}

// DeleteArtifact deletes one of the caller's artifacts, with its bytes (and their copy in
// the backup store) when no other artifact names them.
func (c *Client) DeleteArtifact(ctx context.Context, id string) error {
	return c.do(ctx, "DELETE", "/api/v1/artifacts/"+url.PathEscape(id), nil, nil, http.StatusNoContent)
}

// DownloadArtifact writes an artifact's archive (a gzipped tar) to w.
func (c *Client) DownloadArtifact(ctx context.Context, id string, w io.Writer) (int64, error) {
	return c.artifactBlob(ctx, id, "archive", w)
}

// ArtifactSBOM writes an artifact's CycloneDX SBOM (JSON) to w.
func (c *Client) ArtifactSBOM(ctx context.Context, id string, w io.Writer) (int64, error) {
	return c.artifactBlob(ctx, id, "sbom", w)
}

func (c *Client) artifactBlob(ctx context.Context, id, what string, w io.Writer) (int64, error) {
	resp, err := c.raw(ctx, "GET", "/api/v1/artifacts/"+url.PathEscape(id)+"/"+what, nil, "")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("artifact %s: %s: %w", id, what, err)
	}
	return n, nil
}

// Release makes the caller's live sandbox serve the artifact (its dev sandbox keeps its
// own app) and returns the live sandbox.
func (c *Client) Release(ctx context.Context, id string) (SandboxInfo, error) {
	var out api.Sandbox
	err := c.do(ctx, "POST", "/api/v1/artifacts/"+url.PathEscape(id)+"/release", nil, &out, http.StatusOK)
	return out, err
}
