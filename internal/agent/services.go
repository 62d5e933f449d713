package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// serviceVars are the variables whose addresses the agent serves.
var serviceVars = []string{wire.ServicesEnv, wire.EgressEnv}

// Bounds of the services relay: how long a connection waits for the host to take it, and
// how many may wait at once (more are closed at once, so that a process in the sandbox
// cannot pile up the agent's memory by connecting in a loop).
const servicesMaxWaiting = 256

var servicesWait = 10 * time.Second // a variable for tests

// hostServices are the sandbox's ends of the host's services, by loopback port; a missing
// port is answered with unavailable.
type hostServices struct {
	ports       map[uint32]*services
	unavailable string
}

// services is one listener on the sandbox's loopback whose connections wait for the
// host's Accept calls.
type services struct {
	wait  time.Duration // servicesWait when it was made
	conns chan *net.TCPConn
	slots chan struct{} // one token per waiting connection
}

// startServices listens at the addresses of serviceVars in env until stop is called,
// which returns once everything it started has ended. Failing to listen is not fatal to
// the agent: the sandbox runs without that service, and Accept says why. Ports in
// hostPorts are left alone: the host listens there itself, in the sandbox's network
// namespace (the envelope's HostPorts).
func startServices(env []string, hostPorts []uint32, log *slog.Logger) (hs *hostServices, stop func()) {
	hs = &hostServices{ports: map[uint32]*services{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var listeners []net.Listener
	var why []string
	hosted := 0
	for _, v := range serviceVars {
		raw := lookupEnv(env, v)
		if raw == "" {
			continue
		}
		addr, err := wire.ServicesAddr(v, raw)
		if err == nil && hostListens(addr, hostPorts) {
			hosted++
			continue
		}
		var lis net.Listener
		if err == nil {
			lis, err = net.Listen("tcp", addr)
		}
		if err != nil {
			why = append(why, err.Error())
			log.Warn("host service unavailable", "var", v, "err", err)
			continue
		}
		s := &services{wait: servicesWait, conns: make(chan *net.TCPConn), slots: make(chan struct{}, servicesMaxWaiting)}
		hs.ports[uint32(lis.Addr().(*net.TCPAddr).Port)] = s
		listeners = append(listeners, lis)
		wg.Go(func() { s.accept(ctx, &wg, lis.(*net.TCPListener), log) })
	}
	switch {
	case len(why) > 0:
		hs.unavailable = "the host's services cannot be served in this sandbox: " + strings.Join(why, "; ")
	case len(hs.ports) == 0 && hosted > 0:
		hs.unavailable = "the host listens for its services in this sandbox's network namespace itself: the agent relays nothing"
	case len(hs.ports) == 0:
		hs.unavailable = "this sandbox has no host services (" + wire.ServicesEnv + " is not set)"
	}
	return hs, func() {
		cancel()
		for _, l := range listeners {
			l.Close()
		}
		wg.Wait()
	}
}

// hostListens reports whether addr's port is one of hostPorts.
func hostListens(addr string, hostPorts []uint32) bool {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	port, err := strconv.ParseUint(p, 10, 16)
	return err == nil && slices.Contains(hostPorts, uint32(port))
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

// Accept relays the next connection a process in the sandbox makes to the host's service
// on the port the first request names.
func (n *netService) Accept(stream pb.Net_AcceptServer) error {
	if n.refused != "" {
		// FailedPrecondition, not Unavailable as in Forward: the host is not to try again.
		return errdefs.ToGRPC(fmt.Errorf("%s: %w", n.refused, errdefs.ErrFailedPrecondition))
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	hs := n.services
	var s *services
	if hs != nil {
		s = hs.ports[first.GetPort()]
	}
	if s == nil {
		why := "this sandbox has no host services"
		if hs != nil && hs.unavailable != "" {
			why = hs.unavailable
		}
		return errdefs.ToGRPC(fmt.Errorf("no host service on port %d: %s: %w", first.GetPort(), why, errdefs.ErrFailedPrecondition))
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
