package server

import (
	"context"
	"fmt"
	"os"

	"github.com/paddockhq/paddock/internal/agent"
	"github.com/paddockhq/paddock/internal/egress"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/policy"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/store"
)

// EgressPort is where a process in a sandbox finds the egress proxy, when a network policy
// allows some hosts: 127.0.0.1:3128 on the sandbox's own loopback, relayed by the agent to
// the control plane over the sandbox's channel (as the host's services are).
//
// The issue sketched a Unix socket bind-mounted into the sandbox; the channel does the
// same job (the proxy knows the sandbox by the channel a connection arrived on, and the
// sandbox has no other route out) and works unchanged under gVisor and in a microVM,
// where a host socket cannot be bind-mounted.
const EgressPort = 3128

// egressEnv points HTTP clients in a sandbox at the egress proxy. NO_PROXY keeps the
// sandbox's own loopback (its app, the host's services) direct.
func egressEnv() []string {
	u := fmt.Sprintf("http://127.0.0.1:%d", EgressPort)
	return []string{
		agent.EgressEnv + "=" + u,
		"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "http_proxy=" + u, "https_proxy=" + u,
		"NO_PROXY=127.0.0.1,localhost,::1", "no_proxy=127.0.0.1,localhost,::1",
	}
}

// loadNetworkPolicy reads the network policy file, if any.
func loadNetworkPolicy(path string) (*policy.Policy, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("network_policy: %w: %w", err, errdefs.ErrNotFound)
	}
	return policy.Load(b, path)
}

// initEgress makes the egress proxy when a network policy is configured.
func (s *Server) initEgress(pol *policy.Policy, opts egress.Options) {
	if pol == nil {
		return
	}
	opts.Decider, opts.Log, opts.Registerer, opts.Audit = pol, s.log, s.reg, s.egressAudit
	s.egress = egress.New(opts)
}

// serveEgress serves the egress proxy to one sandbox on connections only it can make.
func (s *Server) serveEgress(rec store.Sandbox, sb *runner.Sandbox) (stop func()) {
	if s.egress == nil {
		return func() {}
	}
	l := sb.Listen(EgressPort, servicesIdle, s.log.With("sandbox", rec.ID))
	go func() { _ = s.egress.ServeSandbox(l, egress.Sandbox{ID: rec.ID}) }()
	return func() { l.Close() }
}

// egressAudit records the proxy's decisions (a refusal, an exchange opened) as events of
// the sandbox's owner, off the connection's path.
func (s *Server) egressAudit(ctx context.Context, e egress.Event) {
	if e.Stage != egress.StageDenied && e.Stage != egress.StageOpened {
		return
	}
	rec, _ := s.fleet.RunningRecord(e.Sandbox)
	action := "egress.allow"
	if e.Stage == egress.StageDenied {
		action = "egress.deny"
	}
	detail := map[string]any{"sandbox_id": e.Sandbox, "method": e.Method, "host": e.Host, "port": e.Port,
		"rule": e.Decision.Rule, "reason": e.Decision.Reason, "status": e.Status}
	if e.Addr.IsValid() {
		detail["addr"] = e.Addr.String()
	}
	go s.event(context.WithoutCancel(ctx), rec.UserID, action, detail)
}
