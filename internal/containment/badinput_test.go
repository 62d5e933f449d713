package containment

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// TestAgentSurvivesBadInput writes what no client should to the agent's socket: garbage,
// a wrong protocol, malformed and oversized HTTP/2 frames, gRPC messages that lie about
// their size. Each may cost the connection that carried it, nothing more: the agent answers
// a fresh Execute afterwards, on the sandbox's own channel and on a new connection.
func TestAgentSurvivesBadInput(t *testing.T) {
	if underRunsc() {
		t.Skip("runsc: the agent serves one connected socket, the control plane's, and there is no listening socket to send garbage on from a second connection; the agent's framing code is the one tested here under runc")
	}
	h := newHarness(t)
	b := h.newBox(t, boxOpts{})
	sock := filepath.Join(h.cfg.StateDir, "sandboxes", b.sb.ID, "agent.sock")
	if fi, err := os.Stat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("CONTROL FAILED: the agent's socket is not at %s: %v", sock, err)
	}
	answers := func(t *testing.T, after string) {
		t.Helper()
		if err := agentAnswers(b); err != nil {
			t.Errorf("after %s, the agent no longer answers on the sandbox's channel: %v", after, err)
		}
		if err := freshAnswer(sock); err != nil {
			t.Errorf("after %s, the agent no longer answers on a new connection: %v", after, err)
		}
	}
	answers(t, "nothing (control)")

	for _, c := range []struct {
		name string
		send func(c net.Conn) error
		// replied reads what the agent says and fails if it took the input as a request;
		// closing the connection is always fine.
		replied func(c net.Conn) (string, error)
	}{
		{name: "64 KiB of random bytes", send: writeRandom(64 << 10)},
		{name: "an HTTP/1.1 request", send: writeString("GET / HTTP/1.1\r\nHost: agent\r\n\r\n")},
		{name: "half an HTTP/2 preface, then hang up", send: func(c net.Conn) error {
			if err := writeString("PRI * HTTP/2.0\r\n")(c); err != nil {
				return err
			}
			return c.(*net.UnixConn).CloseWrite()
		}},
		{name: "an HTTP/2 frame of 16 MiB", send: oversizedFrame},
		{name: "an HTTP/2 SETTINGS frame of garbage", send: garbageSettings},
		{name: "a gRPC message claiming 4 GiB", send: grpcMessage([]byte{0, 0xff, 0xff, 0xff, 0xff, 1, 2, 3}), replied: grpcReply},
		{name: "a gRPC message cut short", send: grpcMessage([]byte{0, 0, 0, 0, 100, 1, 2, 3}), replied: grpcReply},
		{name: "a compressed gRPC message without a codec", send: grpcMessage([]byte{1, 0, 0, 0, 3, 1, 2, 3}), replied: grpcReply},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if err := c.send(conn); err != nil && !errors.Is(err, net.ErrClosed) {
				t.Logf("send: %v (the agent may close before all is written)", err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			if c.replied != nil {
				reply, err := c.replied(conn)
				t.Logf("the agent replied: %s", reply)
				if err != nil {
					t.Error(err)
				}
			} else if err := drained(conn); err != nil {
				t.Errorf("the agent should close a connection that sends this: %v", err)
			}
			answers(t, c.name)
		})
	}

	t.Run("a 20 MiB request through a gRPC client", func(t *testing.T) {
		conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err = pb.NewProcessClient(conn).Execute(ctx, &pb.ExecuteRequest{Argv: []string{"true"}, Stdin: make([]byte, 20<<20)})
		if status.Code(err) != codes.ResourceExhausted {
			t.Errorf("want the agent to refuse a 20 MiB message with ResourceExhausted, got %v", err)
		}
		answers(t, "a 20 MiB request")
	})

	t.Run("64 idle connections", func(t *testing.T) {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for range 64 {
			c, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		answers(t, "64 idle connections") // while they are open
	})
}

// freshAnswer dials the agent anew and runs a command.
func freshAnswer(sock string) error {
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := pb.NewProcessClient(conn).Execute(ctx, &pb.ExecuteRequest{Argv: []string{"echo", "fresh"}})
	if err == nil && string(resp.GetStdout()) != "fresh\n" {
		err = fmt.Errorf("unexpected answer %+v", resp)
	}
	return err
}

// drained reads until the agent closes the connection.
func drained(c net.Conn) error {
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("the connection is still open after 5s")
	}
	return nil // EOF (nil from io.Copy) or a reset: closed
}

func writeRandom(n int) func(net.Conn) error {
	return func(c net.Conn) error {
		b := make([]byte, n)
		_, _ = rand.Read(b)
		_, err := c.Write(b)
		return err
	}
}

func writeString(s string) func(net.Conn) error {
	return func(c net.Conn) error {
		_, err := io.WriteString(c, s)
		return err
	}
}

// oversizedFrame sends the client preface and a DATA frame header announcing 16 MiB - 1,
// past any frame size the server allows.
func oversizedFrame(c net.Conn) error {
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		return err
	}
	hdr := []byte{0xff, 0xff, 0xff, byte(http2.FrameData), 0, 0, 0, 0, 1}
	_, err := c.Write(append(hdr, bytes.Repeat([]byte{0xaa}, 64<<10)...))
	return err
}

// garbageSettings sends a SETTINGS frame whose length is not a multiple of 6.
func garbageSettings(c net.Conn) error {
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		return err
	}
	_, err := c.Write([]byte{0, 0, 7, byte(http2.FrameSettings), 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7})
	return err
}

// grpcMessage opens a proper HTTP/2 connection, starts an Execute call and sends body as
// its (length-prefixed) message, ending the stream.
func grpcMessage(body []byte) func(net.Conn) error {
	return func(c net.Conn) error {
		if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
			return err
		}
		fr := http2.NewFramer(c, c)
		if err := fr.WriteSettings(); err != nil {
			return err
		}
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, f := range [][2]string{
			{":method", "POST"}, {":scheme", "http"}, {":path", "/paddock.agent.v1.Process/Execute"},
			{":authority", "localhost"}, {"content-type", "application/grpc"}, {"te", "trailers"},
		} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
			return err
		}
		return fr.WriteData(1, true, body)
	}
}

// grpcReply reads frames until the agent ends the call or the connection, and says how.
// A call that ends with grpc-status 0 means the agent ran garbage as a request.
func grpcReply(c net.Conn) (string, error) {
	fr := http2.NewFramer(io.Discard, c)
	dec := hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return "", errors.New("the agent neither answered nor closed the connection within 5s")
			}
			return "connection ended: " + err.Error(), nil
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			return "stream reset: " + f.ErrCode.String(), nil
		case *http2.GoAwayFrame:
			return "goaway: " + f.ErrCode.String(), nil
		case *http2.HeadersFrame:
			fields, _ := dec.DecodeFull(f.HeaderBlockFragment())
			for _, hf := range fields {
				if hf.Name != "grpc-status" {
					continue
				}
				n, _ := strconv.Atoi(hf.Value)
				if n == 0 {
					return "grpc-status 0", errors.New("the agent took a malformed message as a valid request")
				}
				return fmt.Sprintf("grpc-status %d (%s)", n, codes.Code(uint32(n))), nil
			}
		}
	}
}
