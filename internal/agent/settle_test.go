package agent

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
	"github.com/paddockhq/paddock/internal/wire/channel"
)

// The agent hands its unused heap back once after it starts serving, and again once
// after each burst of calls, settleAfter after the last one ended.
func TestSettleAfterCalls(t *testing.T) {
	freed := make(chan struct{}, 16)
	s := newSettler(func() { freed <- struct{}{} })
	defer s.stop()
	srv := grpc.NewServer(append(channel.ServerOptions(), s.options()...)...)
	pb.RegisterAgentServer(srv, &agentService{info: &pb.InfoResponse{SandboxId: "sb-test"}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Stop()
	conn, err := grpc.NewClient(l.Addr().String(), append(channel.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	wait := func(what string) {
		t.Helper()
		select {
		case <-freed:
		case <-time.After(30 * time.Second):
			t.Fatalf("no heap handed back %s", what)
		}
	}
	wait("after the start")
	for i := range 2 {
		if _, err := pb.NewAgentClient(conn).Info(context.Background(), &pb.InfoRequest{}); err != nil {
			t.Fatal(err)
		}
		wait("after a call ended")
		select {
		case <-freed:
			t.Fatalf("call %d: heap handed back twice for one burst", i)
		case <-time.After(2 * settleAfter):
		}
	}
}
