package agent

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
)

// settler hands the heap that a burst of work left behind (start-up, a desktop session,
// a large file read) back to the kernel once no call has ended for settleAfter, rather
// than after the minutes the runtime's background scavenger takes. Idle sandboxes are
// most of a host's sandboxes, and the agent is all of an idle one's memory.
//
// Each call's end re-arms it; a stream that stays open does not hold it off, since an
// open stream with nothing on it holds no more heap than its buffers.
type settler struct {
	mu    sync.Mutex
	timer *time.Timer
	free  func()
}

// newSettler starts a settler that calls free (debug.FreeOSMemory in the agent).
func newSettler(free func()) *settler {
	s := &settler{free: free}
	s.timer = time.AfterFunc(settleAfter, func() { s.free() })
	return s
}

// rearm restarts the wait.
func (s *settler) rearm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timer.Reset(settleAfter)
}

func (s *settler) stop() { s.timer.Stop() }

// options are the server options that re-arm s when a call ends.
func (s *settler) options() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			defer s.rearm()
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			defer s.rearm()
			return h(srv, ss)
		}),
	}
}
