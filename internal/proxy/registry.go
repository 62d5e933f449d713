package proxy

import (
	"net"
	"sync"
)

// registry knows every open WebSocket and every upstream connection, so that a swap or
// a sandbox's end can close what it left behind. One mutex orders registrations against
// OwnerChanged: a WebSocket that routed under an old generation but registers after the
// sweep sees the newer generation here and is refused.
type registry struct {
	mu       sync.Mutex
	newest   map[string]int64                     // user → newest generation OwnerChanged saw
	ws       map[string]map[*relay]struct{}       // user → open WebSockets
	upstream map[string]map[*trackedConn]struct{} // sandbox → connections to its app
}

func newRegistry() *registry {
	return &registry{
		newest:   map[string]int64{},
		ws:       map[string]map[*relay]struct{}{},
		upstream: map[string]map[*trackedConn]struct{}{},
	}
}

// register adds c unless a swap already made its generation stale.
func (g *registry) register(c *relay) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c.gen < g.newest[c.user] {
		return false
	}
	set := g.ws[c.user]
	if set == nil {
		set = map[*relay]struct{}{}
		g.ws[c.user] = set
	}
	set[c] = struct{}{}
	return true
}

func (g *registry) unregister(c *relay) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if set := g.ws[c.user]; set != nil {
		delete(set, c)
		if len(set) == 0 {
			delete(g.ws, c.user)
		}
	}
}

// ownerChanged records gen as user's newest and returns the WebSockets older than it.
func (g *registry) ownerChanged(user string, gen int64) []*relay {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gen > g.newest[user] {
		g.newest[user] = gen
	}
	var stale []*relay
	for c := range g.ws[user] {
		if c.gen < gen {
			stale = append(stale, c)
		}
	}
	return stale
}

// sandboxGone returns the WebSockets and connections to sandbox.
func (g *registry) sandboxGone(sandbox string) ([]*relay, []*trackedConn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var conns []*relay
	for _, set := range g.ws {
		for c := range set {
			if c.sandbox == sandbox {
				conns = append(conns, c)
			}
		}
	}
	var streams []*trackedConn
	for c := range g.upstream[sandbox] {
		streams = append(streams, c)
	}
	return conns, streams
}

// all returns everything, for Close.
func (g *registry) all() ([]*relay, []*trackedConn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var conns []*relay
	for _, set := range g.ws {
		for c := range set {
			conns = append(conns, c)
		}
	}
	var streams []*trackedConn
	for _, set := range g.upstream {
		for c := range set {
			streams = append(streams, c)
		}
	}
	return conns, streams
}

// track wraps a new connection to sandbox's app so that it can be found, and forgotten
// when it closes.
func (g *registry) track(sandbox string, c net.Conn) net.Conn {
	t := &trackedConn{Conn: c, g: g, sandbox: sandbox}
	g.mu.Lock()
	defer g.mu.Unlock()
	set := g.upstream[sandbox]
	if set == nil {
		set = map[*trackedConn]struct{}{}
		g.upstream[sandbox] = set
	}
	set[t] = struct{}{}
	return t
}

type trackedConn struct {
	net.Conn
	g       *registry
	sandbox string
	once    sync.Once
}

func (t *trackedConn) Close() error {
	t.once.Do(func() {
		t.g.mu.Lock()
		defer t.g.mu.Unlock()
		if set := t.g.upstream[t.sandbox]; set != nil {
			delete(set, t)
			if len(set) == 0 {
				delete(t.g.upstream, t.sandbox)
			}
		}
	})
	return t.Conn.Close()
}
