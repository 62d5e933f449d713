package runner

import "google.golang.org/grpc"

// ChannelConn is the channel to the sandbox's agent, for tests of the tunnel over it.
func (s *Sandbox) ChannelConn() *grpc.ClientConn { return s.backend.Conn() }
