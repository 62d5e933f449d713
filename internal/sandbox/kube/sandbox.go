package kube

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// Sandbox is a running sandbox on the cluster.
type Sandbox struct {
	c  *Cluster
	ID string
	// Node and PodIP are where its pod runs.
	Node, PodIP string
	persistent  bool
	// template is the hash of the pod template paddock wrote.
	template string
	conn     *grpc.ClientConn

	mu      sync.Mutex
	lastErr string
}

// Conn is the channel to the sandbox's agent.
func (s *Sandbox) Conn() *grpc.ClientConn { return s.conn }

// Cgroup is empty: the sandbox's cgroup is on its node, not here.
func (s *Sandbox) Cgroup() string { return "" }

// OOMKills counts what the pod's memory limit killed: the agent's count of its own
// container's, or one when the limit took the agent itself.
func (s *Sandbox) OOMKills() (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s.conn != nil {
		if info, err := pb.NewAgentClient(s.conn).Info(ctx, &pb.InfoRequest{}); err == nil {
			return info.GetKernelOomKills(), nil
		}
	}
	pod, err := s.c.core.Pods(s.c.cfg.Namespace).Get(ctx, s.ID, metav1.GetOptions{})
	if err != nil {
		return 0, s.c.apiError("sandbox "+s.ID, err)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.Reason == "OOMKilled" {
			return 1, nil
		}
	}
	return 0, nil
}

// LastError is what the pod says of its end, when it has ended.
func (s *Sandbox) LastError() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastErr == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return s.c.podStory(ctx, s.ID)
	}
	return s.lastErr
}

// Destroy closes the channel and ends the pod: a persistent sandbox is suspended, its
// workspace kept on its volume for the next start; any other is deleted with its volume.
func (s *Sandbox) Destroy(ctx context.Context) error {
	var err error
	if s.conn != nil {
		err = s.conn.Close()
	}
	if s.persistent {
		return errors.Join(err, s.c.Suspend(ctx, s.ID))
	}
	return errors.Join(err, s.c.Remove(ctx, s.ID))
}
