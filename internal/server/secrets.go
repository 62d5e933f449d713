package server

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/secrets"
)

// The caller's own secrets: PUT, GET (a listing, never values) and DELETE under
// /me/secrets, the seed's contract, and the same under /api/v1/me/secrets. No handler
// here reads a value back: only the broker does.

// maxSecretBody caps a PUT's body: a 64 KiB value, each byte escaped as \u00XX at worst,
// and the JSON around it.
const maxSecretBody = 6*secrets.MaxValueSize + 1024

func (s *Server) putSecret(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	name := r.PathValue("name")
	if err := secrets.ValidateName(name); err != nil {
		return err
	}
	var req api.PutSecretRequest
	if err := api.DecodeJSON(w, r, &req, maxSecretBody); err != nil {
		if errors.Is(err, api.ErrTooLarge) {
			return valueTooLarge(name)
		}
		return err
	}
	if len(req.Value) > secrets.MaxValueSize {
		return valueTooLarge(name)
	}
	info, err := s.secrets.Put(r.Context(), c.UserID, name, []byte(req.Value))
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, apiSecret(info))
	return nil
}

func valueTooLarge(name string) error {
	return fmt.Errorf("secret %q: the value is over the limit of %d bytes (64 KiB): %w", name, secrets.MaxValueSize, api.ErrTooLarge)
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	infos, err := s.secrets.List(r.Context(), c.UserID)
	if err != nil {
		return err
	}
	out := api.SecretList{Secrets: make([]api.Secret, 0, len(infos))}
	for _, i := range infos {
		out.Secrets = append(out.Secrets, apiSecret(i))
	}
	api.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	if err := s.secrets.Delete(r.Context(), c.UserID, r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func apiSecret(i secrets.Info) api.Secret {
	return api.Secret{Name: i.Name, Version: i.Version, CreatedAt: i.CreatedAt, UpdatedAt: i.UpdatedAt}
}
