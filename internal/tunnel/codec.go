package tunnel

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the protobuf codec used below
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// codec is the Forward call's gRPC codec: protobuf, except that responses are decoded into
// pooled buffers (see inbound). grpc's own protobuf codec gathers each message into a
// zeroed buffer and then copies its data out again; this is most of a tunnel's cost.
type codec struct{}

var _ encoding.CodecV2 = codec{}

func (codec) Name() string { return "proto" }

func (codec) Marshal(v any) (mem.BufferSlice, error) { return encoding.GetCodecV2("proto").Marshal(v) }

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	if in, ok := v.(*inbound); ok {
		return in.decode(data)
	}
	return encoding.GetCodecV2("proto").Unmarshal(data, v)
}

// inbound is a ForwardResponse whose data lives in a buffer of the chunk pool (or, for a
// message larger than a chunk, which the agent does not send, a buffer of its own).
type inbound struct {
	connected bool
	data      []byte
	buf       *[]byte
}

// decode parses a ForwardResponse as proto.Unmarshal would: unknown fields are skipped and,
// of repeated scalar fields, the last wins. The bytes come from the sandbox's agent, which
// the sandbox may have subverted: they are bounds-checked and never trusted (FuzzDecode).
func (in *inbound) decode(data mem.BufferSlice) error {
	n := data.Len()
	if n <= chunkCap {
		in.buf = chunks.Get().(*[]byte)
	} else {
		b := make([]byte, n)
		in.buf = &b
	}
	b := (*in.buf)[:n]
	data.CopyTo(b)
	in.connected, in.data = false, nil
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return in.fail(l)
		}
		if !num.IsValid() {
			return in.fail(-1)
		}
		b = b[l:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			var v uint64
			v, l = protowire.ConsumeVarint(b)
			in.connected = v != 0
		case num == 2 && typ == protowire.BytesType:
			in.data, l = protowire.ConsumeBytes(b)
		default:
			l = protowire.ConsumeFieldValue(num, typ, b)
		}
		if l < 0 {
			return in.fail(l)
		}
		b = b[l:]
	}
	return nil
}

func (in *inbound) fail(code int) error {
	in.release()
	return fmt.Errorf("malformed ForwardResponse from the agent: %w: %w", protowire.ParseError(code), errdefs.ErrUnavailable)
}

// release returns the buffer to the pool; data must not be used after.
func (in *inbound) release() {
	if in.buf != nil && cap(*in.buf) == chunkCap {
		chunks.Put(in.buf)
	}
	in.buf, in.data = nil, nil
}
