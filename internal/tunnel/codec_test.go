package tunnel

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// decode reads what the (possibly subverted) agent sends: whatever the bytes, it must not
// panic, and where protobuf accepts them it must agree with protobuf.
func FuzzDecode(f *testing.F) {
	for _, m := range []*pb.ForwardResponse{{Connected: true}, {Data: []byte("hello")}, {Data: make([]byte, chunkSize)}} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Add([]byte{0x12, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		// Split the message in two buffers, as HTTP/2 frames split it.
		data := mem.BufferSlice{mem.SliceBuffer(b[:len(b)/2]), mem.SliceBuffer(b[len(b)/2:])}
		var in inbound
		err := in.decode(data)
		var want pb.ForwardResponse
		werr := proto.Unmarshal(b, &want)
		if err == nil && werr == nil && (in.connected != want.Connected || !bytes.Equal(in.data, want.Data)) {
			t.Fatalf("decode = %v %q, protobuf %v %q", in.connected, in.data, want.Connected, want.Data)
		}
		if (err == nil) != (werr == nil) {
			t.Fatalf("decode: %v, protobuf: %v", err, werr)
		}
		in.release()
	})
}
