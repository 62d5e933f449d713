// Package sandbox holds what every isolation tier shares: the agent's channel (a listening
// Unix socket created on the host and inherited by the agent as a descriptor) and the pipe
// that carries the bootstrap envelope. The tiers themselves live in subpackages.
package sandbox

import (
	"bytes"
	"fmt"
	"net"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/paddockhq/paddock/internal/wire"
	"github.com/paddockhq/paddock/internal/wire/channel"
)

// DefaultPath is a sandbox's PATH: the usual directories, plus Go's install directory,
// since hosts put the toolchain there.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/go/bin"

// AgentListenFD is where the agent finds its listening socket: the first inherited
// descriptor after stdio.
const AgentListenFD = 3

// Listen makes the agent's listening socket at path and returns it as a file to hand to the
// agent. The host keeps the path; only the agent holds the descriptor, so in tiers with a
// mount namespace nothing else in the sandbox can reach the socket.
func Listen(path string) (*os.File, error) {
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	l.SetUnlinkOnClose(false)
	f, err := l.File()
	l.Close()
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	return f, nil
}

// Dial opens the channel to the agent listening at path. It does not wait: the first RPC
// does, until the agent accepts (the socket's backlog holds the connection meanwhile).
func Dial(path string) (*grpc.ClientConn, error) {
	opts := append(channel.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient("unix://"+path, opts...)
	if err != nil {
		return nil, fmt.Errorf("agent channel: %w", err)
	}
	return conn, nil
}

// EnvelopePipe encodes env and returns the read end of a pipe that holds it, for the
// agent's stdin. release starts filling the pipe: a tier that must do something before the
// agent may go on (the process tier puts it in its cgroup) calls it when ready; the agent
// blocks on its stdin until then.
func EnvelopePipe(env *wire.Envelope) (r *os.File, release func(), err error) {
	var buf bytes.Buffer
	if err := wire.WriteEnvelope(&buf, env); err != nil {
		return nil, nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	release = func() {
		go func() {
			_, _ = w.Write(buf.Bytes())
			w.Close()
		}()
	}
	return r, release, nil
}
