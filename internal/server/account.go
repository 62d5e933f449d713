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
	ttl, err := expiresIn(req.ExpiresIn)
	if err != nil {
		return err
	}
	spec.TTL = ttl
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
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return invalidQuery("before", v, "an event ID (a positive number)")
		}
		f.Before = n
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

// Registration invites (admins).

func (s *Server) listInvites(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	ins, err := s.auth.ListInvites(r.Context(), inviteAdmin(r, c))
	if err != nil {
		return err
	}
	out := api.InviteList{Invites: []api.Invite{}}
	for _, in := range ins {
		out.Invites = append(out.Invites, apiInvite(in, ""))
	}
	api.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) createInvite(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	var req api.CreateInviteRequest
	if err := api.DecodeJSON(w, r, &req, 4<<10); err != nil {
		return err
	}
	spec := auth.InviteSpec{Uses: req.Uses}
	var err error
	if spec.TTL, err = expiresIn(req.ExpiresIn); err != nil {
		return err
	}
	code, in, err := s.auth.CreateInvite(r.Context(), inviteAdmin(r, c), spec)
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusCreated, apiInvite(in, code))
	return nil
}

func (s *Server) revokeInvite(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	if err := s.auth.RevokeInvite(r.Context(), inviteAdmin(r, c), r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// inviteAdmin is the caller as auth sees it, an admin only when acting as one (a
// token needs scope admin, which the route already checked).
func inviteAdmin(r *http.Request, c fleet.Caller) auth.User {
	u := webCaller(r).User
	if !c.Admin {
		u.Role = store.RoleUser
	}
	return u
}

func apiInvite(in store.Invite, code string) api.Invite {
	out := api.Invite{ID: in.ID, Prefix: in.Prefix, CreatedAt: in.CreatedAt, ExpiresAt: in.ExpiresAt, MaxUses: in.MaxUses, Uses: in.Uses, Code: code}
	if !in.RevokedAt.IsZero() {
		at := in.RevokedAt
		out.RevokedAt = &at
	}
	return out
}

// expiresIn reads a request's expires_in, a positive Go duration; "" is 0 (the default).
func expiresIn(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("expires_in %q: want a positive duration like \"24h\" or \"90m\": %w", errdefs.Clip(s, 40), errdefs.ErrInvalidArgument)
	}
	return d, nil
}
