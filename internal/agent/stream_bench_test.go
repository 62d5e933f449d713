package agent

import (
	"io"
	"testing"

	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// BenchmarkStreamOutput moves 256 MiB of a session's stdout through the agent's channel to a
// client, as `paddock run` does (profile with -cpuprofile to see where the copies go).
func BenchmarkStreamOutput(b *testing.B) {
	t := &testing.T{}
	conn, _ := startAgent(t, nil)
	c := pb.NewProcessClient(conn)
	const size = 256 << 20
	b.SetBytes(size)
	for b.Loop() {
		s, err := c.Start(b.Context(), &pb.StartRequest{Argv: []string{"head", "-c", "268435456", "/dev/zero"}})
		if err != nil {
			b.Fatal(err)
		}
		var got int
		for {
			ev, err := s.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			got += len(ev.GetOutput().GetData())
		}
		if got != size {
			b.Fatalf("read %d bytes, want %d", got, size)
		}
	}
}
