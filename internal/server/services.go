package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/netutil"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/broker"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/gateway"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/secrets"
	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/wire"
)

// DefaultServicesURL is where a process in a sandbox reaches the host's services (the
// secrets broker, the provider gateway): a port on the sandbox's own loopback, which the
// sandbox's agent relays to the control plane over the sandbox's channel.
const DefaultServicesURL = "http://127.0.0.1:4750"

// servicesIdle is how many relayed connections each sandbox's agent holds ready, and
// servicesConns how many one sandbox may hold open at once: more wait in the agent (and
// are closed there after a while), so that a sandbox cannot tie up the control plane
// with connections.
const (
	servicesIdle  = 2
	servicesConns = 64
)

// initServices makes the broker and has the fleet serve the host's services to every
// sandbox it runs. Call it before the fleet recovers sandboxes.
func (s *Server) initServices() error {
	policy, text, err := loadBrokerPolicy(s.cfg.BrokerPolicy)
	if err != nil {
		return err
	}
	s.reloaded.broker = text
	s.broker, err = broker.New(s.st, brokerSandboxes{s.fleet}, brokerSecrets{s.secrets}, policy, s.reg, s.log)
	if err != nil {
		return err
	}
	s.broker.SetGrantLimit(s.cfg.BrokerGrants.PerSecond, s.cfg.BrokerGrants.Burst)
	mux := http.NewServeMux()
	mux.Handle("/v1/", s.broker.Handler())
	if len(s.cfg.Gateway.Providers) > 0 {
		g, err := gateway.New(s.cfg.Gateway, gateway.Options{Log: s.log, Registerer: s.reg, Usage: s.gatewayUsage,
			Ledger: newUsageLedger(s.st, nil), Rates: s.gatewayRates()})
		if err != nil {
			return err
		}
		s.gateway = g
		mux.Handle("/gateway/", s.gatewayCaller(http.StripPrefix("/gateway", g)))
	}
	s.handleAgentServices(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		api.WriteErrorCode(w, http.StatusNotFound, api.CodeNotFound, fmt.Sprintf("the host's services have no %s; the broker is at /v1/capabilities/NAME", r.URL.Path))
	})
	s.services = mux
	s.fleet.SetServices(s.serveServices)
	s.fleet.SetPoolServices(s.servePoolEgress)
	return nil
}

// servicesPort is the port of services_url (which Config.check has validated).
func servicesPort(raw string) (int, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return 0, fmt.Errorf("services_url: %w", err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		return 0, fmt.Errorf("services_url %q: no port: %w", u, errdefs.ErrInvalidArgument)
	}
	return p, nil
}

// serveServices serves the host's services to one sandbox, on connections that only its
// processes can make (see runner.Sandbox.Listen): every request on them is that sandbox's,
// whatever it says.
func (s *Server) serveServices(rec store.Sandbox, sb *runner.Sandbox) (stop func()) {
	log := s.log.With("sandbox", rec.ID)
	l := sb.Listen(s.servicesPort, servicesIdle, log)
	hs := &http.Server{
		Handler:           s.services,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ConnContext:       func(ctx context.Context, _ net.Conn) context.Context { return broker.WithSandbox(ctx, rec.ID) },
	}
	go func() { _ = hs.Serve(netutil.LimitListener(l, servicesConns)) }()
	stopEgress := s.serveEgress(rec, sb)
	stopHistory := s.ops.FollowHistory(rec, sb)
	return func() {
		stopHistory()
		stopEgress()
		hs.Close()
		l.Close()
	}
}

// gatewayCaller puts the sandbox's identity, from its channel, where the gateway reads it.
func (s *Server) gatewayCaller(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := broker.SandboxFrom(r.Context())
		rec, ok := s.fleet.RunningRecord(id)
		if !ok {
			api.WriteError(w, s.log, fmt.Errorf("sandbox %s is not running: %w", id, errdefs.ErrFailedPrecondition))
			return
		}
		next.ServeHTTP(w, r.WithContext(gateway.WithCaller(r.Context(), gateway.Caller{UserID: rec.UserID, SandboxID: id})))
	})
}

// gatewayUsage records a completion's tokens as an event of the user's, off the response's
// path.
func (s *Server) gatewayUsage(ctx context.Context, u gateway.Usage) {
	detail := map[string]any{
		"sandbox_id": u.Caller.SandboxID, "provider": u.Provider, "model": u.Model,
		"input_tokens": u.InputTokens, "output_tokens": u.OutputTokens,
	}
	if u.Estimated {
		detail["estimated"] = true // the answer did not reach its end: see gateway.Usage
	}
	go s.event(context.WithoutCancel(ctx), u.Caller.UserID, "gateway.usage", detail)
}

// gatewayEnv tells a sandbox's SDKs where the gateway's first OpenAI-style and
// Anthropic-style providers are, and the coding agent every provider's name and kind. The
// keys are placeholders, there only because the SDKs refuse to start without one: the
// gateway drops them and adds the platform's.
func gatewayEnv(cfg gateway.Config, servicesURL string) []string {
	var env, pairs []string
	seen := map[string]bool{}
	for _, p := range cfg.Providers {
		pairs = append(pairs, p.Name+"="+p.Kind)
		if seen[p.Kind] {
			continue
		}
		seen[p.Kind] = true
		switch p.Kind {
		case gateway.KindOpenAI:
			env = append(env, "OPENAI_BASE_URL="+servicesURL+"/gateway/"+p.Name+"/v1", "OPENAI_API_KEY="+gatewayPlaceholderKey)
		case gateway.KindAnthropic:
			env = append(env, "ANTHROPIC_BASE_URL="+servicesURL+"/gateway/"+p.Name, "ANTHROPIC_API_KEY="+gatewayPlaceholderKey)
		}
	}
	if len(pairs) > 0 {
		env = append(env, wire.AgentProvidersEnv+"="+strings.Join(pairs, ","))
	}
	if cfg.AgentModel != "" && len(cfg.Providers) > 0 {
		env = append(env, wire.AgentModelEnv+"="+cfg.AgentModel)
	}
	return env
}

// gatewayPlaceholderKey is what sandboxes hold instead of a provider key.
const gatewayPlaceholderKey = "paddock-gateway-adds-the-key"

// sandboxGone is the fleet's hook for a sandbox that stopped serving: the proxy drops its
// connections and the broker revokes its leases.
func (s *Server) sandboxGone(id string) {
	s.proxy.SandboxGone(id)
	s.broker.RevokeSandbox(context.Background(), id, "the sandbox stopped")
}

// brokerSandboxes tells the broker whose a sandbox is, from the fleet.
type brokerSandboxes struct{ f *fleet.Fleet }

func (b brokerSandboxes) Identify(ctx context.Context, id string) (broker.Identity, error) {
	rec, ok := b.f.RunningRecord(id)
	if !ok {
		return broker.Identity{}, nil // not running: the broker refuses it
	}
	role, err := b.f.RoleOf(ctx, rec.UserID, id)
	if err != nil {
		return broker.Identity{}, err
	}
	return broker.Identity{UserID: rec.UserID, Username: rec.Username, Role: role, Running: true}, nil
}

// brokerSecrets reveals user secrets to the broker.
type brokerSecrets struct{ s *secrets.Secrets }

func (b brokerSecrets) Reveal(ctx context.Context, userID, name string) ([]byte, error) {
	if b.s == nil {
		return nil, fmt.Errorf("no secrets store: %w", errdefs.ErrUnavailable)
	}
	v, _, err := b.s.Get(ctx, userID, name)
	if err != nil {
		return nil, err
	}
	return v.Reveal(), nil
}

// Broker is the secrets broker (benchmarks set its policy).
func (s *Server) Broker() *broker.Broker { return s.broker }
