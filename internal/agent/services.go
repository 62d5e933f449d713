package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// ServicesEnv is the variable in the sandbox's environment that holds the base URL of the
// host's services (the secrets broker, the provider gateway): an http URL on the sandbox's
// own loopback. The agent listens there and relays each connection to the host over its
// channel (Net.Accept), so that the host knows which sandbox is asking from the channel a
// request arrives on, and the sandbox needs no route to the host at all.
const ServicesEnv = "PADDOCK_SERVICES_URL"

// Bounds of the services relay: how long a connection waits for the host to take it, and
// how many may wait at once (more are closed at once, so that a process in the sandbox
// cannot pile up the agent's memory by connecting in a loop).
const servicesMaxWaiting = 256

var servicesWait = 10 * time.Second // a variable for tests

// services is the sandbox's end of the host's services: a listener on the sandbox's
// loopback whose connections wait for the host's Accept calls.
type services struct {
	addr  string
	wait  time.Duration // servicesWait when it was made
	conns chan *net.TCPConn
	slots chan struct{} // one token per waiting connection
	// unavailable, when set, is why there are none (no address configured, or no
	// loopback to listen on); Accept answers it.
	unavailable string
}

// startServices listens at the address of ServicesEnv in env, if any, until stop is
// called, which returns once everything it started has ended. Failing to listen is not
// fatal to the agent: the sandbox runs without the host's services, and Accept says why.
func startServices(env []string, log *slog.Logger) (s *services, stop func()) {
	s = &services{wait: servicesWait, conns: make(chan *net.TCPConn), slots: make(chan struct{}, servicesMaxWaiting)}
	raw := lookupEnv(env, ServicesEnv)
	if raw == "" {
		s.unavailable = "this sandbox has no host services (" + ServicesEnv + " is not set)"
		return s, func() {}
	}
	addr, err := servicesAddr(raw)
	if err == nil {
		var lis net.Listener
		if lis, err = net.Listen("tcp", addr); err == nil {
			s.addr = addr
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Go(func() { s.accept(ctx, &wg, lis.(*net.TCPListener), log) })
			return s, func() {
				cancel()
				lis.Close()
				wg.Wait()
			}
		}
	}
	s.unavailable = fmt.Sprintf("the host's services cannot be served in this sandbox: %v", err)
	log.Warn("host services unavailable", "err", err)
	return s, func() {}
}

// servicesAddr is the host:port of a services URL, which must be plain http on a loopback
// IP literal: anything else would have the agent listen where others than the sandbox's
// own processes could connect.
func servicesAddr(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Port() == "" {
		return "", fmt.Errorf("%s=%q: want http://127.0.0.1:PORT", ServicesEnv, raw)
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		return "", fmt.Errorf("%s=%q: the host must be a loopback address", ServicesEnv, raw)
	}
	return u.Host, nil
}

func lookupEnv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

// accept hands each connection to a waiting Accept call, or closes it when none takes it
// within servicesWait (the host is away) or too many already wait.
func (s *services) accept(ctx context.Context, wg *sync.WaitGroup, lis *net.TCPListener, log *slog.Logger) {
	for {
		c, err := lis.AcceptTCP()
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("host services: accept", "err", err)
			}
			return
		}
		select {
		case s.slots <- struct{}{}:
		default:
			c.Close()
			continue
		}
		wg.Go(func() { s.handOff(ctx, c) })
	}
}

func (s *services) handOff(ctx context.Context, c *net.TCPConn) {
	defer func() { <-s.slots }()
	t := time.NewTimer(s.wait)
	defer t.Stop()
	select {
	case s.conns <- c:
	case <-t.C:
		c.Close()
	case <-ctx.Done():
		c.Close()
	}
}

// Accept relays the next connection a process in the sandbox makes to the host's services.
func (n *netService) Accept(stream pb.Net_AcceptServer) error {
	if n.refused != "" {
		// FailedPrecondition, not Unavailable as in Forward: the host is not to try again.
		return errdefs.ToGRPC(fmt.Errorf("%s: %w", n.refused, errdefs.ErrFailedPrecondition))
	}
	s := n.services
	if s == nil || s.unavailable != "" {
		why := "this sandbox has no host services"
		if s != nil {
			why = s.unavailable
		}
		return errdefs.ToGRPC(fmt.Errorf("%s: %w", why, errdefs.ErrFailedPrecondition))
	}
	var conn *net.TCPConn
	select {
	case conn = <-s.conns:
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
	defer conn.Close()
	if err := stream.Send(&pb.ForwardResponse{Connected: true}); err != nil {
		return err
	}
	go relayToApp(stream, conn, &pb.ForwardRequest{})
	return errdefs.ToGRPC(relayFromApp(stream, conn))
}
