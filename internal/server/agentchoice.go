package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/wire"
)

// maxAgentChoiceBody bounds PUT /api/v1/me/agent's body: two short strings.
const maxAgentChoiceBody = 4 << 10

// getAgentChoice is GET /api/v1/me/agent: the caller's provider and model for the coding
// agent, and the gateway's providers to choose from.
func (s *Server) getAgentChoice(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	choice, err := s.st.AgentChoice(r.Context(), c.UserID)
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, s.agentSettings(choice))
	return nil
}

// putAgentChoice is PUT /api/v1/me/agent. The provider must be one the gateway
// configures, so that a typo is said now rather than at the next turn.
func (s *Server) putAgentChoice(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	var req api.AgentChoice
	if err := api.DecodeJSON(w, r, &req, maxAgentChoiceBody); err != nil {
		return err
	}
	if err := s.checkAgentChoice(req); err != nil {
		return err
	}
	choice := store.AgentChoice{Provider: req.Provider, Model: req.Model}
	if err := s.st.SetAgentChoice(r.Context(), c.UserID, choice); err != nil {
		return err
	}
	s.event(r.Context(), c.UserID, "agent.choice", map[string]any{"provider": req.Provider, "model": req.Model})
	api.WriteJSON(w, http.StatusOK, s.agentSettings(choice))
	return nil
}

// checkAgentChoice refuses a provider the gateway does not configure, naming those it
// does, and a model name no provider would use.
func (s *Server) checkAgentChoice(c api.AgentChoice) error {
	if c.Model != "" {
		if err := wire.CheckAgentModel(c.Model); err != nil {
			return fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
		}
	}
	if c.Provider == "" || s.agentProvider(c.Provider) != nil {
		return nil
	}
	var names []string
	for _, p := range s.cfg.Gateway.Providers {
		names = append(names, p.Name)
	}
	if len(names) == 0 {
		return fmt.Errorf("provider %q: this server configures no gateway providers: %w", errdefs.Clip(c.Provider, 64), errdefs.ErrInvalidArgument)
	}
	return fmt.Errorf("provider %q: not one of the gateway's providers (%s): %w", errdefs.Clip(c.Provider, 64), strings.Join(names, ", "), errdefs.ErrInvalidArgument)
}

// agentProvider is the gateway's provider called name, or nil.
func (s *Server) agentProvider(name string) *api.AgentProvider {
	for _, p := range s.cfg.Gateway.Providers {
		if p.Name == name {
			return &api.AgentProvider{Name: p.Name, Kind: p.Kind}
		}
	}
	return nil
}

// agentSettings shows a stored choice with what there is to choose from. A provider the
// configuration no longer has shows as none: the default applies.
func (s *Server) agentSettings(c store.AgentChoice) api.AgentSettings {
	out := api.AgentSettings{DefaultModel: s.cfg.Gateway.AgentModel, Providers: []api.AgentProvider{}}
	out.Model = c.Model
	if c.Provider != "" && s.agentProvider(c.Provider) != nil {
		out.Provider = c.Provider
	}
	for _, p := range s.cfg.Gateway.Providers {
		out.Providers = append(out.Providers, api.AgentProvider{Name: p.Name, Kind: p.Kind})
	}
	return out
}

// agentChoiceEnv adds the caller's choice to the environment of a run of the coding agent
// (paddock-agent code), which takes it as its defaults: the run's own flags, and an
// environment the client gave, still win. Other commands are left as they are.
func (s *Server) agentChoiceEnv(ctx context.Context, c fleet.Caller, argv, env []string) ([]string, error) {
	if len(argv) < 2 || argv[0] != wire.AgentPath || argv[1] != wire.CodeSubcommand {
		return env, nil
	}
	choice, err := s.st.AgentChoice(ctx, c.UserID)
	if err != nil {
		return nil, err
	}
	env = slices.Clip(env)
	if choice.Provider != "" && s.agentProvider(choice.Provider) != nil && !hasEnv(env, wire.AgentProviderEnv) {
		env = append(env, wire.AgentProviderEnv+"="+choice.Provider)
	}
	if choice.Model != "" && !hasEnv(env, wire.AgentModelEnv) {
		env = append(env, wire.AgentModelEnv+"="+choice.Model)
	}
	return env, nil
}

// hasEnv reports whether env has an entry for name.
func hasEnv(env []string, name string) bool {
	return slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
}
