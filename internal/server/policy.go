package server

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/policy"
)

// Policies in force are package sandboxops's: which one governs a sandbox, and what it
// decides (its threat model is there too).

// The routes: GET, PUT and DELETE /api/v1/sandboxes/{id}/policy. Ownership is the
// fleet's: another user's sandbox is "not found".

func (s *Server) getPolicy(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	out, err := s.ops.GetPolicy(r.Context(), c, r.PathValue("id"))
	return writeOr(w, http.StatusOK, out, err)
}

// putPolicy attaches the policy in the body. One that does not load is refused with the
// line and field, and the sandbox keeps the policy it had.
func (s *Server) putPolicy(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	out, err := s.ops.PutPolicy(r.Context(), c, r.PathValue("id"), func() ([]byte, error) { return readPolicyBody(w, r) })
	return writeOr(w, http.StatusOK, out, err)
}

func (s *Server) deletePolicy(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	if err := s.ops.DeletePolicy(r.Context(), c, r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// readPolicyBody reads a PUT's body: a policy file, YAML or plain text, at most
// policy.MaxFileSize bytes.
func readPolicyBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || !slices.Contains(api.PolicyMediaTypes, mt) {
		return nil, fmt.Errorf("Content-Type %q: send the policy file as application/yaml or text/plain: %w", ct, api.ErrUnsupportedMedia)
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, policy.MaxFileSize))
	var maxErr *http.MaxBytesError
	switch {
	case errors.As(err, &maxErr):
		return nil, fmt.Errorf("policy over %d bytes: %w", policy.MaxFileSize, api.ErrTooLarge)
	case err != nil:
		return nil, fmt.Errorf("read request body: %w", errdefs.ErrInvalidArgument)
	case len(strings.TrimSpace(string(b))) == 0:
		return nil, fmt.Errorf("request body: empty; send the policy file (to detach a policy, DELETE it): %w", errdefs.ErrInvalidArgument)
	}
	return b, nil
}
