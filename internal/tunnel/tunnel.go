// Package tunnel opens TCP connections to apps inside a sandbox over the sandbox's agent
// channel (the Net.Forward RPC), as net.Conns: the control plane's reverse proxy hands them
// to net/http and WebSocket libraries, and never reaches a sandbox over a network port of
// the host's.
//
// Threat model: the far end is the sandbox's app, which is hostile. The tunnel only relays
// its bytes (it parses none of them), bounds what it buffers to one chunk per direction, and
// applies the caller's deadlines, so a stalled or flooding app holds up only the caller that
// reads from it. Whether a caller may reach a sandbox at all is decided before Dial.
package tunnel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paddockhq/paddock/internal/errdefs"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// chunkSize bounds the data of one request: as the agent's chunks, large enough that
// framing is noise, small enough not to hold back interactive traffic.
const chunkSize = 32 << 10

// lingerTimeout bounds how long a closed tunnel waits for the app to close its side after
// reading EOF, as the kernel bounds FIN_WAIT_2, before the stream is cut.
const lingerTimeout = 5 * time.Second

// chunkCap is the capacity of a pooled buffer: a chunk, or a response framing one.
const chunkCap = chunkSize + 64

// chunks holds the buffers of both directions; their contents are not cleared.
var chunks = sync.Pool{New: func() any { b := make([]byte, chunkCap); return &b }}

// Addr is one end of a tunnel. String is host:port so that code that splits addresses
// (access logs, net/http's Request.RemoteAddr) still can.
type Addr struct {
	// Host is "sandbox" for the far end (the sandbox's own loopback) and "agent-channel"
	// for the near one.
	Host string
	// Port is the far end's TCP port inside the sandbox; 0 for the near end.
	Port int
}

// Network names the transport: not TCP from here, whatever it is inside the sandbox.
func (a Addr) Network() string { return "paddock-tunnel" }

func (a Addr) String() string { return net.JoinHostPort(a.Host, strconv.Itoa(a.Port)) }

// Conn is a TCP connection to an app in a sandbox, relayed by the sandbox's agent. Besides
// net.Conn it has CloseWrite, as *net.TCPConn does. Close must be called to release it.
type Conn struct {
	port   int
	what   string // names the connection in errors
	stream pb.Net_ForwardClient
	cancel context.CancelFunc

	closed    chan struct{} // closed by Close
	closeOnce sync.Once

	readMu   sync.Mutex // serializes Read; guards pending
	pending  inbound    // the rest of the chunk being read
	recv     chan inbound
	recvDone chan struct{} // closed when receive has stopped, after recvErr is set
	recvErr  error

	writeMu  sync.Mutex // serializes Write and CloseWrite; guards shut
	shut     bool       // CloseWrite has been called
	send     chan outgoing
	sendDone chan struct{} // closed when transmit has stopped, after sendErr is set
	sendErr  error

	readDeadline, writeDeadline deadline
}

// outgoing is a request for transmit: a pooled chunk to send, or the half-close.
type outgoing struct {
	buf        *[]byte
	closeWrite bool
}

var (
	_ net.Conn                        = (*Conn)(nil)
	_ interface{ CloseWrite() error } = (*Conn)(nil)
)

// Dial connects to port on the loopback of the sandbox whose agent is at the other end of
// conn, and returns once the agent has connected: an app that is not listening is an error
// here (wrapping errdefs.ErrUnavailable), not on the first Read. ctx bounds the dial only,
// as with net.Dialer.DialContext.
func Dial(ctx context.Context, conn *grpc.ClientConn, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("tunnel: port %d: want a TCP port (1-65535): %w", port, errdefs.ErrInvalidArgument)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	stream, err := connect(sctx, conn, port)
	if !stop() {
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("tunnel to port %d in the sandbox: %w", port, err)
	}
	return newConn(stream, port, fmt.Sprintf("tunnel to port %d in the sandbox", port), cancel), nil
}

// newConn relays stream as a net.Conn; cancel ends the stream once both directions are done.
func newConn(stream pb.Net_ForwardClient, port int, what string, cancel context.CancelFunc) *Conn {
	c := &Conn{
		port: port, what: what, stream: stream, cancel: cancel, closed: make(chan struct{}),
		recv: make(chan inbound), recvDone: make(chan struct{}),
		send: make(chan outgoing), sendDone: make(chan struct{}),
	}
	go c.receive()
	go c.transmit()
	go func() {
		<-c.recvDone
		<-c.sendDone
		cancel()
	}()
	return c
}

// connect opens the stream, names the port, and waits for the agent's answer.
func connect(ctx context.Context, conn *grpc.ClientConn, port int) (pb.Net_ForwardClient, error) {
	stream, err := pb.NewNetClient(conn).Forward(ctx, grpc.ForceCodecV2(codec{}))
	if err != nil {
		return nil, remoteErr(err)
	}
	// A failed Send means the stream has ended; Recv tells why.
	_ = stream.Send(&pb.ForwardRequest{Port: uint32(port)})
	var resp inbound
	err = stream.RecvMsg(&resp)
	resp.release()
	switch {
	case errors.Is(err, io.EOF), err == nil && !resp.connected:
		return nil, fmt.Errorf("the agent ended the stream without connecting: %w", errdefs.ErrUnavailable)
	case err != nil:
		return nil, remoteErr(err)
	}
	return stream, nil
}

// remoteErr turns the agent's status into the error taxonomy.
func remoteErr(err error) error {
	if status.Code(err) == codes.Unimplemented {
		return fmt.Errorf("the sandbox's agent cannot forward ports (it predates Net.Forward): %w", errdefs.ErrUnavailable)
	}
	return errdefs.FromGRPC(err)
}

// receive hands what the app writes to Read, one chunk at a time: while Read does not take
// it, receive does not ask for more, and gRPC's flow control holds the app back. After
// Close it discards what arrives until the stream ends.
func (c *Conn) receive() {
	defer close(c.recvDone)
	for {
		var in inbound
		if err := c.stream.RecvMsg(&in); err != nil {
			c.recvErr = c.streamErr(err)
			return
		}
		if len(in.data) == 0 {
			in.release()
			continue
		}
		select {
		case c.recv <- in:
		case <-c.closed:
			in.release()
		}
	}
}

// transmit sends what Write and CloseWrite queue, in order; it owns the stream's send side,
// which it closes after Close (the agent then half-closes the app's connection).
func (c *Conn) transmit() {
	defer close(c.sendDone)
	for {
		select {
		case out := <-c.send:
			if err := c.sendOne(out); err != nil {
				c.sendErr = c.streamErr(err)
				if errors.Is(c.sendErr, io.EOF) {
					c.sendErr = fmt.Errorf("%s: the other end closed the connection: %w", c.what, errdefs.ErrUnavailable)
				}
				return
			}
		case <-c.closed:
			c.sendErr = net.ErrClosed
			_ = c.stream.CloseSend()
			return
		}
	}
}

func (c *Conn) sendOne(out outgoing) error {
	if out.closeWrite {
		return c.stream.Send(&pb.ForwardRequest{CloseWrite: true})
	}
	defer chunks.Put(out.buf)
	return c.stream.Send(&pb.ForwardRequest{Data: *out.buf})
}

// streamErr is the error Read or Write reports for a stream that failed with err.
func (c *Conn) streamErr(err error) error {
	select {
	case <-c.closed:
		return net.ErrClosed
	default:
	}
	if errors.Is(err, io.EOF) {
		return io.EOF // the app closed its side: the stream ended with OK
	}
	return fmt.Errorf("%s: %w", c.what, remoteErr(err))
}

// Read reads what the app wrote. It returns io.EOF once the app has closed its side.
func (c *Conn) Read(p []byte) (int, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if err := c.check(&c.readDeadline); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if len(c.pending.data) == 0 {
		select {
		case c.pending = <-c.recv:
		case <-c.recvDone:
			return 0, c.recvErr
		case <-c.closed:
			return 0, net.ErrClosed
		case <-c.readDeadline.wait():
			return 0, os.ErrDeadlineExceeded
		}
	}
	n := copy(p, c.pending.data)
	c.pending.data = c.pending.data[n:]
	if len(c.pending.data) == 0 {
		c.pending.release()
	}
	return n, nil
}

// Write queues p for the app, a chunk at a time; it returns once the last chunk is queued,
// as a socket's write returns once its data is in the send buffer. A write that the
// deadline cuts short may have queued part of p, which n counts.
func (c *Conn) Write(p []byte) (n int, err error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if c.shut {
		return 0, fmt.Errorf("%s: write after CloseWrite: %w", c.what, errdefs.ErrFailedPrecondition)
	}
	for len(p) > 0 {
		buf := chunks.Get().(*[]byte)
		k := copy((*buf)[:chunkSize], p)
		*buf = (*buf)[:k]
		if err := c.queue(outgoing{buf: buf}); err != nil {
			chunks.Put(buf)
			return n, err
		}
		n += k
		p = p[k:]
	}
	return n, nil
}

// CloseWrite half-closes the connection once everything written before is sent: the app
// reads EOF, and may still answer.
func (c *Conn) CloseWrite() error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if c.shut {
		return nil
	}
	if err := c.queue(outgoing{closeWrite: true}); err != nil {
		return err
	}
	c.shut = true
	return nil
}

func (c *Conn) queue(out outgoing) error {
	if err := c.check(&c.writeDeadline); err != nil {
		return err
	}
	select {
	case c.send <- out:
		return nil
	case <-c.sendDone:
		return c.sendErr
	case <-c.closed:
		return net.ErrClosed
	case <-c.writeDeadline.wait():
		return os.ErrDeadlineExceeded
	}
}

// check reports a closed conn or a passed deadline before anything else, as net.Conn's
// contract asks, even when data is ready.
func (c *Conn) check(d *deadline) error {
	select {
	case <-c.closed:
		return net.ErrClosed
	case <-d.wait():
		return os.ErrDeadlineExceeded
	default:
		return nil
	}
}

// Close closes the connection as a socket's close does: Read and Write fail at once, what
// Write has queued is still delivered, and the app reads EOF. What the app sends after
// that is dropped; an app that does not close its side within lingerTimeout is cut off.
func (c *Conn) Close() error {
	err := net.ErrClosed
	c.closeOnce.Do(func() {
		close(c.closed)
		time.AfterFunc(lingerTimeout, c.cancel)
		err = nil
	})
	return err
}

// LocalAddr is the near end: the agent channel.
func (c *Conn) LocalAddr() net.Addr { return Addr{Host: "agent-channel"} }

// RemoteAddr is the far end: the port on the sandbox's loopback.
func (c *Conn) RemoteAddr() net.Addr { return Addr{Host: "sandbox", Port: c.port} }

func (c *Conn) SetDeadline(t time.Time) error {
	c.readDeadline.set(t)
	c.writeDeadline.set(t)
	return nil
}

func (c *Conn) SetReadDeadline(t time.Time) error {
	c.readDeadline.set(t)
	return nil
}

func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.writeDeadline.set(t)
	return nil
}

// deadline is a settable deadline whose channel is closed while it has passed (after
// net.Pipe's): Read and Write select on it, so setting a deadline wakes them. The zero
// value has none.
type deadline struct {
	mu    sync.Mutex
	timer *time.Timer
	ch    chan struct{}
}

func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.ch // the timer fired: wait for it to have closed ch
	}
	d.timer = nil
	if d.ch == nil || isClosed(d.ch) {
		d.ch = make(chan struct{})
	}
	if t.IsZero() {
		return
	}
	if dur := time.Until(t); dur > 0 {
		ch := d.ch
		d.timer = time.AfterFunc(dur, func() { close(ch) })
		return
	}
	close(d.ch)
}

func (d *deadline) wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ch == nil {
		d.ch = make(chan struct{})
	}
	return d.ch
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
