package sandbox

import "google.golang.org/grpc"

// Agent is what every tier's sandbox keeps of its agent: the channel to it and the signal
// of its end. The tiers embed it, so that these accessors are written once.
type Agent struct {
	// AgentConn is the gRPC channel to the agent; nil until the tier has dialled it.
	AgentConn *grpc.ClientConn
	// AgentExited is closed once the agent has exited, whatever ended it; nil where the
	// tier holds no handle on the agent.
	AgentExited chan struct{}
}

// Conn is the channel to the sandbox's agent.
func (a *Agent) Conn() *grpc.ClientConn { return a.AgentConn }

// Exited is closed once the agent has exited: killed, crashed, or ended by Destroy. Nil
// before the agent started, or where the tier holds no handle on it.
func (a *Agent) Exited() <-chan struct{} { return a.AgentExited }

// CloseConn closes the channel to the agent, if it was dialled. Destroy calls it first:
// no call waits on an agent that is being killed.
func (a *Agent) CloseConn() error {
	if a.AgentConn == nil {
		return nil
	}
	return a.AgentConn.Close()
}
