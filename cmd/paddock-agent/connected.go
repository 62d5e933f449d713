package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"

	"github.com/paddockhq/paddock/internal/agent"
	"github.com/paddockhq/paddock/internal/wire"
)

// connectedFlag says that the envelope's listen_fd is one connected socket whose other end
// the host holds, not a listening socket: gVisor (runsc) can pass a host socket into the
// sandbox only connected. It is internal/sandbox/container's ConnectedFlag.
const connectedFlag = "--connected"

// bootstrapConnected is agent.Bootstrap for a connected channel: the agent serves its RPC
// on that one connection.
func bootstrapConnected(ctx context.Context, stdin *os.File, confine agent.Confiner, log *slog.Logger) error {
	env, err := wire.ReadEnvelope(stdin)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	stdin.Close()
	f := os.NewFile(uintptr(env.ListenFD), "agent-channel")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("bootstrap: listen_fd %d is not a connected socket: %w", env.ListenFD, err)
	}
	return agent.Run(ctx, env, newOneConnListener(c), confine, log)
}

// oneConnListener accepts one connection it was given, then nothing until it is closed.
type oneConnListener struct {
	conns  chan net.Conn
	addr   net.Addr
	closed chan struct{}
	once   sync.Once
}

func newOneConnListener(c net.Conn) *oneConnListener {
	l := &oneConnListener{conns: make(chan net.Conn, 1), addr: c.LocalAddr(), closed: make(chan struct{})}
	l.conns <- c
	return l
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return l.addr }
