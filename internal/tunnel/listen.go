package tunnel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paddockhq/paddock/internal/errdefs"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// Listener accepts the connections that processes in one sandbox make to the host's
// services, which the sandbox's agent relays over its channel (Net.Accept). Whoever serves
// a Listener knows which sandbox every connection comes from: the one whose channel it is.
//
// It keeps a few Accept calls waiting in the agent, so that a new connection is relayed at
// once, and opens another as each one is taken.
type Listener struct {
	conn  *grpc.ClientConn
	port  uint32 // the service's port on the sandbox's loopback
	log   *slog.Logger
	ctx   context.Context
	stop  context.CancelFunc
	conns chan *Conn
	wg    sync.WaitGroup

	errOnce sync.Once
	err     error // why the agent serves no connections at all; set before ctx is cancelled
}

// Listen starts accepting, on the channel conn, the connections made to the service the
// agent serves on port of the sandbox's loopback, with idle Accept calls waiting. Close it
// to stop.
func Listen(conn *grpc.ClientConn, port, idle int, log *slog.Logger) *Listener {
	ctx, stop := context.WithCancel(context.Background())
	l := &Listener{conn: conn, port: uint32(port), log: log, ctx: ctx, stop: stop, conns: make(chan *Conn)}
	for range max(idle, 1) {
		l.wg.Add(1)
		go l.wait()
	}
	return l
}

// Retry bounds of a waiting Accept call that failed: the channel may be reconnecting.
const (
	retryMin = 50 * time.Millisecond
	retryMax = 5 * time.Second
)

// wait keeps one Accept call open at a time and hands each connection it relays to Accept.
func (l *Listener) wait() {
	defer l.wg.Done()
	delay := retryMin
	for {
		c, err := l.acceptOne()
		switch {
		case err == nil:
			delay = retryMin
			select {
			case l.conns <- c:
			case <-l.ctx.Done():
				c.Close()
				return
			}
			continue
		case l.ctx.Err() != nil:
			return
		case permanent(err):
			l.fail(err)
			return
		}
		select {
		case <-time.After(delay):
		case <-l.ctx.Done():
			return
		}
		delay = min(2*delay, retryMax)
	}
}

// permanent says whether an Accept failure will not change by trying again: the sandbox
// has no services address, its tier refuses, or its agent predates Accept.
func permanent(err error) bool {
	return errors.Is(err, errdefs.ErrFailedPrecondition)
}

// fail stops the listener for good with err, which Accept then returns.
func (l *Listener) fail(err error) {
	l.errOnce.Do(func() {
		l.err = err
		l.log.Info("host services not served to this sandbox", "err", err)
		l.stop()
	})
}

// acceptOne opens an Accept call and waits until the agent relays a connection on it.
func (l *Listener) acceptOne() (*Conn, error) {
	ctx, cancel := context.WithCancel(l.ctx)
	stream, err := pb.NewNetClient(l.conn).Accept(ctx, grpc.ForceCodecV2(codec{}))
	if err != nil {
		cancel()
		return nil, acceptErr(err)
	}
	// A failed Send means the stream has ended; Recv tells why.
	_ = stream.Send(&pb.ForwardRequest{Port: l.port})
	var resp inbound
	err = stream.RecvMsg(&resp)
	resp.release()
	switch {
	case errors.Is(err, io.EOF), err == nil && !resp.connected:
		err = fmt.Errorf("the agent ended the stream without a connection: %w", errdefs.ErrUnavailable)
	case err != nil:
		err = acceptErr(err)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return newConn(stream, 0, "services connection from the sandbox", cancel), nil
}

func acceptErr(err error) error {
	if status.Code(err) == codes.Unimplemented {
		return fmt.Errorf("the sandbox's agent cannot relay connections to the host (it predates Net.Accept): %w", errdefs.ErrFailedPrecondition)
	}
	return errdefs.FromGRPC(err)
}

// Accept returns the next connection from the sandbox.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.ctx.Done():
		if l.err != nil {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

// Close stops accepting; connections already accepted stay open. It waits for the waiting
// Accept calls to end.
func (l *Listener) Close() error {
	l.stop()
	l.wg.Wait()
	return nil
}

// Addr is the near end: the agent channel.
func (l *Listener) Addr() net.Addr { return Addr{Host: "agent-channel"} }
