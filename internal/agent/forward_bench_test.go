package agent

import (
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/paddockhq/paddock/internal/tunnel"
)

// BenchmarkForward moves 64 MiB from an app to a caller, over a tunnel through the agent's
// channel and, for comparison, over a direct loopback TCP connection.
func BenchmarkForward(b *testing.B) {
	const size = 64 << 20
	port := serveTCP(b, func(c *net.TCPConn) {
		var req [1]byte
		for {
			if _, err := io.ReadFull(c, req[:]); err != nil {
				return
			}
			if _, err := io.CopyN(c, zeros{}, size); err != nil {
				return
			}
		}
	})
	conn, _ := startAgentTier(b, "container", nil)
	run := func(b *testing.B, c net.Conn) {
		b.SetBytes(size)
		buf := make([]byte, 256<<10)
		for b.Loop() {
			if _, err := c.Write([]byte{1}); err != nil {
				b.Fatal(err)
			}
			if _, err := io.CopyBuffer(io.Discard, io.LimitReader(c, size), buf); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("tunnel", func(b *testing.B) {
		c, err := tunnel.Dial(b.Context(), conn, port)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		run(b, c)
	})
	b.Run("direct", func(b *testing.B) {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		run(b, c)
	})
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
