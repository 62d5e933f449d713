package container

import (
	"fmt"
	"net"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"github.com/paddockhq/paddock/internal/sandbox"
)

// channel is the agent's channel as the host holds it before and after the container starts.
//
// Under runc it is a listening socket at <dir>/agent.sock: the agent inherits the listening
// descriptor, the host dials the path, and may dial it again.
//
// Under runsc it is one end of a socketpair. gVisor passes a host descriptor into the
// sandbox (runsc run --pass-fd) as a host-backed socket that can send and receive but not
// accept: a listening socket would reach the agent unable to accept anything. The other
// way would be a directory bound into the sandbox in which the agent creates its socket
// (runsc --host-uds=create) and which the host waits for and dials; but that socket's path
// would be in the sandbox, so any process there could connect to the agent or, worse,
// replace the socket with its own and answer the host in the agent's name, and
// --host-uds=create would let the sandbox make host-visible sockets in /workspace too.
// The socketpair keeps the property runc gives: only the agent holds the channel. Its
// price: it is a single connection that cannot be redialled, so the gRPC client must never
// drop it on its own (no idle timeout), and if the connection breaks the sandbox is
// unreachable, which is also what an agent that died means under runc.
type channel struct {
	sandboxEnd *os.File // goes to the container; the host closes its copy once started
	dial       func() (*grpc.ClientConn, error)
	// close releases what dial has not handed to gRPC; it is idempotent.
	close func()
}

func (rt *Runtime) openChannel(dir string) (*channel, error) {
	if !rt.connected {
		sock := filepath.Join(dir, "agent.sock")
		lis, err := sandbox.Listen(sock)
		if err != nil {
			return nil, err
		}
		return &channel{sandboxEnd: lis, dial: func() (*grpc.ClientConn, error) { return sandbox.Dial(sock) }, close: func() {}}, nil
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	hostFile := os.NewFile(uintptr(fds[0]), "agent-channel")
	hostEnd, err := net.FileConn(hostFile)
	hostFile.Close()
	if err != nil {
		unix.Close(fds[1])
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	one := sandbox.NewOneConn(hostEnd)
	return &channel{
		sandboxEnd: os.NewFile(uintptr(fds[1]), "agent-channel-sandbox"),
		dial:       func() (*grpc.ClientConn, error) { return sandbox.DialConn(one) },
		close:      one.Close,
	}, nil
}
