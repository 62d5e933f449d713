package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"
	"time"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/paddockhq/paddock/internal/errdefs"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
	"github.com/paddockhq/paddock/internal/wire/channel"
)

// ProcessTierForwardReason is why Forward is refused in the process tier: the agent there
// shares the host's network namespace, so "the sandbox's loopback" would be the host's,
// and forwarding would hand every caller of the channel the host's local services.
const ProcessTierForwardReason = "port forwarding is unavailable in the process tier (--insecure): it has no network namespace of its own, so the sandbox's loopback would be the host's; use the container or microvm tier"

// Sizes of the relay. A chunk is what one read from the app's connection may fill and one
// response carries: large enough that framing is noise, small enough that an interactive
// stream (a terminal over WebSocket) is not held back.
const (
	forwardChunk       = 32 << 10
	forwardDialTimeout = 10 * time.Second
)

// netService serves the Net RPCs.
type netService struct {
	pb.UnimplementedNetServer
	// refused, when set, is why every Forward and Accept is refused (the process tier).
	refused string
	// services are the sandbox's ends of the host's services, for Accept.
	services *hostServices
}

var _ pb.NetServer = (*netService)(nil)

// Forward dials the port the first request names and relays bytes both ways until the app
// closes its side (the stream then ends with OK), the caller goes away, or either side
// fails.
func (n *netService) Forward(stream pb.Net_ForwardServer) error {
	if n.refused != "" {
		return errdefs.ToGRPC(fmt.Errorf("%s: %w", n.refused, errdefs.ErrUnavailable))
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	port, err := forwardPort(first.GetPort())
	if err != nil {
		return errdefs.ToGRPC(err)
	}
	conn, err := dialLoopback(stream.Context(), port)
	if err != nil {
		return errdefs.ToGRPC(err)
	}
	defer conn.Close()
	if err := stream.Send(&pb.ForwardResponse{Connected: true}); err != nil {
		return err
	}
	// The upstream half ends on its own once this handler returns: grpc then cancels the
	// stream, which fails its Recv, and the deferred Close fails its Write.
	go relayToApp(stream, conn, first)
	return errdefs.ToGRPC(relayFromApp(stream, conn))
}

func forwardPort(p uint32) (int, error) {
	if p < 1 || p > 65535 {
		return 0, fmt.Errorf("port %d: want a TCP port (1-65535): %w", p, errdefs.ErrInvalidArgument)
	}
	return int(p), nil
}

// dialLoopback connects to port on the sandbox's loopback: IPv4 first, since that is what
// most servers bind, then IPv6 for those that bind only ::1.
func dialLoopback(ctx context.Context, port int) (*net.TCPConn, error) {
	ctx, cancel := context.WithTimeout(ctx, forwardDialTimeout)
	defer cancel()
	var d net.Dialer
	var errs []error
	for _, host := range []string{"127.0.0.1", "::1"} {
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err == nil {
			return c.(*net.TCPConn), nil
		}
		errs = append(errs, err)
	}
	if allRefused(errs) {
		return nil, fmt.Errorf("nothing listening on port %d in the sandbox: %w", port, errdefs.ErrUnavailable)
	}
	return nil, fmt.Errorf("port %d in the sandbox: %w: %w", port, errors.Join(errs...), errdefs.ErrUnavailable)
}

// allRefused says whether every attempt found no listener, as opposed to a failure worth
// reporting as it is (no IPv6, a timeout, no loopback interface at all).
func allRefused(errs []error) bool {
	refused := false
	for _, err := range errs {
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			refused = true
		case errors.Is(err, syscall.EADDRNOTAVAIL), errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EAFNOSUPPORT):
			// This address family is not configured here; the other attempt decides.
		default:
			return false
		}
	}
	return refused
}

// relayToApp writes what the caller sends to the app. close_write, or the end of the
// caller's send side, shuts the connection's write side after everything before it, so the
// app reads EOF and may still answer; any failure closes the connection, which ends
// relayFromApp too.
func relayToApp(stream pb.Net_ForwardServer, conn *net.TCPConn, req *pb.ForwardRequest) {
	for {
		if len(req.GetData()) > 0 {
			if _, err := conn.Write(req.GetData()); err != nil {
				conn.Close()
				return
			}
		}
		if req.GetCloseWrite() {
			_ = conn.CloseWrite()
		}
		var err error
		if req, err = stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				_ = conn.CloseWrite()
			} else {
				conn.Close()
			}
			return
		}
	}
}

// relayFromApp sends what the app writes to the caller until the app closes its side. Each
// chunk is read into a pooled buffer that the response carries as it is (see outChunk):
// grpc returns it to the pool once written.
func relayFromApp(stream pb.Net_ForwardServer, conn *net.TCPConn) error {
	for {
		buf := channel.Buffers.Get(forwardChunk)
		n, err := conn.Read(*buf)
		if n > 0 {
			*buf = (*buf)[:n]
			if err := stream.SendMsg(&outChunk{buf: buf}); err != nil {
				return err
			}
		} else {
			channel.Buffers.Put(buf)
		}
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case errors.Is(err, net.ErrClosed):
			// relayToApp closed the connection: the caller went away or failed.
			return stream.Context().Err()
		case err != nil:
			return fmt.Errorf("read from the app: %w: %w", err, errdefs.ErrUnavailable)
		}
	}
}

// outChunk is a ForwardResponse carrying data from a pooled buffer, which the channel codec
// frames in place and hands to grpc to return to the pool.
type outChunk struct{ buf *[]byte }

// Frame encodes ForwardResponse{data: *c.buf} exactly as proto.Marshal does.
func (c *outChunk) Frame() mem.BufferSlice {
	head := protowire.AppendTag(nil, 2, protowire.BytesType) // ForwardResponse.data
	head = protowire.AppendVarint(head, uint64(len(*c.buf)))
	return mem.BufferSlice{mem.SliceBuffer(head), mem.NewBuffer(c.buf, channel.Buffers)}
}
