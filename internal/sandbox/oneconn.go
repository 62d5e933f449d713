package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/paddockhq/paddock/internal/wire/channel"
)

// OneConn hands out its connection once: the agent's channel when it is a single connected
// stream that cannot be redialled (a socketpair under runsc, a VM's virtio-serial port).
type OneConn struct {
	mu sync.Mutex
	c  net.Conn
}

// NewOneConn wraps c.
func NewOneConn(c net.Conn) *OneConn { return &OneConn{c: c} }

// errChannelGone is what a second dial of a connected channel gets.
var errChannelGone = errors.New("the agent's channel (one connection) is closed and cannot be dialled again")

func (o *OneConn) take(context.Context, string) (net.Conn, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.c == nil {
		return nil, errChannelGone
	}
	c := o.c
	o.c = nil
	return c, nil
}

// Close closes the connection unless it was taken (gRPC closes it then). It is idempotent.
func (o *OneConn) Close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.c != nil {
		o.c.Close()
		o.c = nil
	}
}

// DialConn is a gRPC client over one's connection: its first dial gets it, any later one
// fails. Idleness is off: gRPC would otherwise drop the connection after 30 minutes
// without RPCs, and could not get it back; so is the handshake's timeout.
func DialConn(one *OneConn) (*grpc.ClientConn, error) {
	opts := append(channel.DialOptions(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(one.take),
		grpc.WithIdleTimeout(0),
		// The HTTP/2 handshake on the one connection must not be given up on a timer:
		// gRPC's default (20 s for the agent's preface) closes the connection, and there
		// is no other. A microVM under TCG on a loaded host can be that slow to answer.
		grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 10 * time.Minute, Backoff: backoff.DefaultConfig}),
	)
	conn, err := grpc.NewClient("passthrough:///paddock-agent", opts...)
	if err != nil {
		return nil, fmt.Errorf("agent channel: %w", err)
	}
	return conn, nil
}
