package server

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/paddockhq/paddock/internal/egress"
	"github.com/paddockhq/paddock/internal/policy"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/wire"
)

// EgressPort is where a process in a sandbox finds the egress proxy, when a network policy
// allows some hosts: 127.0.0.1:3128 on the sandbox's own loopback. Under runc the control
// plane listens there itself, in the network namespace it made for the sandbox
// (runner.Config.HostPorts); under runsc and in a microVM the agent relays the port to
// the control plane over the sandbox's channel (as the host's services are).
//
// The issue sketched a Unix socket bind-mounted into the sandbox; both ways do the same
// job (the proxy knows the sandbox by the listener or channel a connection arrived on,
// and the sandbox has no other route out), and the relay works under gVisor and in a
// microVM, where a host socket cannot be bind-mounted.
const EgressPort = 3128

// egressEnv points HTTP clients in a sandbox at the egress proxy. NO_PROXY keeps the
// sandbox's own loopback (its app, the host's services) direct.
func egressEnv() []string {
	u := fmt.Sprintf("http://127.0.0.1:%d", EgressPort)
	return []string{
		wire.EgressEnv + "=" + u,
		"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "http_proxy=" + u, "https_proxy=" + u,
		"NO_PROXY=127.0.0.1,localhost,::1", "no_proxy=127.0.0.1,localhost,::1",
	}
}

// loadNetworkPolicy reads the network policy file, if any, and returns it with its text.
// The name "registries" (no file) is the built-in policy of the public registries.
func loadNetworkPolicy(path string) (*policy.Policy, string, error) {
	if path == policy.RegistriesName {
		p, err := policy.Load([]byte(policy.Registries), "network_policy: "+policy.RegistriesName)
		return p, policy.Registries, err
	}
	return readPolicyFile(path, "network_policy", policy.Load)
}

// initEgress makes the egress proxy when a network policy is configured.
func (s *Server) initEgress(pol *policy.Policy, text string, opts egress.Options) {
	if pol == nil {
		return
	}
	s.netPolicy.Store(pol)
	s.reloaded.network = text
	opts.Decider, opts.Log, opts.Registerer, opts.Audit = netCeiling{s}, s.log, s.reg, s.egressAudit
	opts.Capabilities = s.caps // net: tokens, for the sandbox the connection came from
	if s.upstreamProxy != nil {
		opts.UpstreamProxy = s.upstreamProxy
	}
	s.egress = egress.New(opts)
}

// netCeiling decides by the server's network_policy as last loaded (see Reload).
type netCeiling struct{ s *Server }

func (c netCeiling) Host(host string) policy.Decision { return c.s.netPolicy.Load().Host(host) }

// reloadNetworkPolicy reads network_policy again, when the server started with one (without
// one, sandboxes have no route to the proxy, and a reload cannot give them one). One that
// does not load leaves the last good one in force.
func (s *Server) reloadNetworkPolicy() (changed bool, err error) {
	if s.egress == nil || s.cfg.NetworkPolicy == "" {
		return false, nil
	}
	p, text, err := loadNetworkPolicy(s.cfg.NetworkPolicy)
	if err != nil {
		return false, err
	}
	s.netPolicy.Store(p)
	return swapText(&s.reloaded.network, text), nil
}

// serveEgress serves the egress proxy to one sandbox on connections only it can make.
func (s *Server) serveEgress(rec store.Sandbox, sb *runner.Sandbox) (stop func()) {
	if s.egress == nil {
		return func() {}
	}
	l := sb.Listen(EgressPort, servicesIdle, s.log.With("sandbox", rec.ID))
	go func() {
		_ = s.egress.ServeSandbox(l, egress.Sandbox{ID: rec.ID, Decider: sandboxNetwork{s: s, id: rec.ID}})
	}()
	return func() { l.Close() }
}

// servePoolEgress serves the egress proxy to a template pool's sandbox while it is
// readied: it is no one's yet, so the server's network_policy alone decides.
func (s *Server) servePoolEgress(sb *runner.Sandbox) (stop func()) {
	if s.egress == nil {
		return func() {}
	}
	l := sb.Listen(EgressPort, servicesIdle, s.log.With("sandbox", sb.ID, "pool", true))
	reached := &poolHosts{}
	s.poolReached.Store(sb.ID, reached)
	go func() {
		_ = s.egress.ServeSandbox(l, egress.Sandbox{ID: sb.ID, Decider: poolNetwork{s: s, reached: reached}})
	}()
	return func() { l.Close() }
}

// poolNetwork is the server's network_policy, for a sandbox that is no one's; it notes
// the hosts it lets the sandbox reach.
type poolNetwork struct {
	s       *Server
	reached *poolHosts
}

func (n poolNetwork) Host(host string) policy.Decision {
	d := n.s.netPolicy.Load().Host(host)
	if d.Allow {
		n.reached.add(host)
	}
	return d
}

// poolHosts is the set of hosts a template pool's sandbox was let reach while it was
// readied: what it holds came from there, so a sandbox may take it only where its own
// policy lets it reach them too.
type poolHosts struct {
	mu    sync.Mutex
	hosts map[string]bool
}

func (h *poolHosts) add(host string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hosts == nil {
		h.hosts = map[string]bool{}
	}
	h.hosts[host] = true
}

func (h *poolHosts) list() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Sorted(maps.Keys(h.hosts))
}

// poolRefusal says why sandbox id may not take what pool member memberID fetched: the
// first host it reached that id's network decision refuses (or allows only with a
// capability token, which a hand-over cannot present); "" when it may. It forgets the
// member's hosts: a member is taken once.
func (s *Server) poolRefusal(memberID, id string) string {
	v, ok := s.poolReached.LoadAndDelete(memberID)
	if !ok {
		return ""
	}
	for _, host := range v.(*poolHosts).list() {
		// The policy's question, not the step's narrowing: the member fetched, not the step.
		d := sandboxNetwork{s: s, id: id}.decide(host)
		switch {
		case !d.Allow:
			return fmt.Sprintf("this sandbox may not reach %s, which the warm pool's member fetched from (%s)", host, d.Rule)
		case d.RequireCapability:
			return fmt.Sprintf("this sandbox reaches %s only with a capability token, which the warm pool's member fetched from without one", host)
		}
	}
	return ""
}

// sandboxNetwork decides the hosts one sandbox may reach: the server's network_policy
// first — the operator's ceiling, which nothing a user attaches can lift — and then, when
// the policy in force for the sandbox (its own, its owner's, the default) has a network
// section, that section too; while a provider step runs in the sandbox, only its
// registries among what those allow. Deny wins. The sandbox's policy is looked up at every
// connection, so attaching or detaching one (or reloading network_policy) takes effect at
// the next connection.
type sandboxNetwork struct {
	s  *Server
	id string
}

func (n sandboxNetwork) Host(host string) policy.Decision {
	d := n.decide(host)
	if run, ok := n.s.steps.of(n.id); ok {
		return run.narrow(host, d)
	}
	return d
}

// decide is Host without a provider step's narrowing.
func (n sandboxNetwork) decide(host string) policy.Decision {
	d := n.s.netPolicy.Load().Host(host)
	if !d.Allow {
		return d
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec, ok := n.s.fleet.RunningRecord(n.id)
	if !ok {
		return policy.Decision{Rule: "network", Reason: "the sandbox is not running"}
	}
	in, err := n.s.pol.ForSandbox(ctx, rec)
	if err != nil {
		return policy.Decision{Rule: "network", Reason: "the sandbox's policy could not be read: " + err.Error()}
	}
	if in.Policy() == nil || !in.Policy().HasNetwork() {
		return d
	}
	sd := in.Policy().Host(host)
	sd.Rule = in.Source() + " policy " + sd.Rule
	// Either policy may ask for a capability token; neither can waive the other's.
	sd.RequireCapability = sd.Allow && (sd.RequireCapability || d.RequireCapability)
	return sd
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
	if e.Capability != "" {
		detail["capability"] = e.Capability
	}
	go s.event(context.WithoutCancel(ctx), rec.UserID, action, detail)
}
