package server

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/auth"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/store"
)

// API tokens and the event log of the signed-in user.

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	toks, err := s.auth.ListAPITokens(r.Context(), c.UserID)
	if err != nil {
		return err
	}
	out := api.TokenList{Tokens: []api.Token{}}
	now := time.Now()
	for _, t := range toks {
		if t.RevokedAt.IsZero() && now.Before(t.ExpiresAt) {
			out.Tokens = append(out.Tokens, apiToken(t, ""))
		}
	}
	api.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	var req api.CreateTokenRequest
	if err := api.DecodeJSON(w, r, &req, 4<<10); err != nil {
		return err
	}
	spec := auth.TokenSpec{Name: req.Name}
	if req.Scopes != nil {
		sc, err := auth.ScopesOf(req.Scopes)
		if err != nil {
			return err
		}
		spec.Scopes = sc
	}
	if req.ExpiresIn != "" {
		d, err := time.ParseDuration(req.ExpiresIn)
		if err != nil || d <= 0 {
			return fmt.Errorf("expires_in %q: want a positive duration like \"24h\" or \"90m\": %w", clipQuery(req.ExpiresIn), errdefs.ErrInvalidArgument)
		}
		spec.TTL = d
	}
	wc := webCaller(r)
	spec.Parent = wc.Token
	tok, info, err := s.auth.CreateAPIToken(r.Context(), wc.User, spec)
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusCreated, apiToken(info, tok.Reveal()))
	return nil
}

func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	if err := s.auth.RevokeAPIToken(r.Context(), c.UserID, r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func apiToken(t store.APIToken, secret string) api.Token {
	out := api.Token{ID: t.ID, Name: t.Name, Prefix: t.Prefix, CreatedAt: t.CreatedAt, Secret: secret,
		Scopes: auth.TokenScopes(t).Strings()}
	if !t.ExpiresAt.IsZero() {
		exp := t.ExpiresAt
		out.ExpiresAt = &exp
	}
	if !t.LastUsedAt.IsZero() {
		used := t.LastUsedAt
		out.LastUsedAt = &used
	}
	return out
}

// events lists the caller's own events (an admin may add ?all=true), newest first.
func (s *Server) events(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	q := r.URL.Query()
	f := store.AuditFilter{ActorUserID: c.UserID, Action: q.Get("action"), Limit: 100}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return invalidQuery("limit", v, "a number from 1 to 1000")
		}
		f.Limit = n
	}
	if v := q.Get("all"); v == "true" {
		if !c.Admin {
			return s.fleetDenied("every user's events")
		}
		f.ActorUserID = ""
	}
	evs, err := s.st.ListAudit(r.Context(), f)
	if err != nil {
		return err
	}
	out := api.EventList{Events: []api.Event{}}
	for _, e := range evs {
		out.Events = append(out.Events, api.Event{ID: e.ID, At: e.At.UTC().Truncate(time.Microsecond), Actor: e.ActorUserID, Action: e.Action, Target: e.Target, Detail: e.Detail})
	}
	api.WriteJSON(w, http.StatusOK, out)
	return nil
}
