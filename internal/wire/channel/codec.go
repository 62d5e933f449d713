package channel

import (
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the protobuf codec used below
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// Codec is the channel's gRPC codec: protobuf, byte for byte, except that an output
// event or a Framed message (the agent's forwarded chunks), which are most of what crosses
// the channel, is framed around its own bytes instead of being copied into a message
// buffer first. (Output chunks are never changed once read, so grpc may hold on to them
// until they are written; forwarded chunks are pooled buffers that grpc returns to the
// pool.) Everything else, and all decoding, is grpc's protobuf codec.
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

// Framed is a message that encodes itself exactly as proto.Marshal would encode the
// message it stands for, into buffers of its own.
type Framed interface {
	Frame() mem.BufferSlice
}

// minZeroCopy is the smallest output framed in place: below it, a copy is cheaper than
// three buffers.
const minZeroCopy = 16 << 10

func (Codec) Name() string { return "proto" }

func protoCodec() encoding.CodecV2 { return encoding.GetCodecV2("proto") }

func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(Framed); ok {
		return f.Frame(), nil
	}
	if ev, ok := v.(*pb.ProcessEvent); ok {
		if out := ev.GetOutput(); out != nil && len(out.GetData()) >= minZeroCopy {
			return marshalOutput(out), nil
		}
	}
	return protoCodec().Marshal(v)
}

func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	return protoCodec().Unmarshal(data, v)
}

// marshalOutput encodes ProcessEvent{output: out} exactly as proto.Marshal does (fields in
// number order, zero values left out), with out.Data as a buffer of its own.
func marshalOutput(out *pb.Output) mem.BufferSlice {
	var head, tail []byte
	if out.Stream != 0 {
		head = protowire.AppendTag(head, 1, protowire.VarintType)
		head = protowire.AppendVarint(head, uint64(out.Stream))
	}
	head = protowire.AppendTag(head, 2, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(len(out.Data)))
	if out.Offset != 0 {
		tail = protowire.AppendTag(tail, 3, protowire.VarintType)
		tail = protowire.AppendVarint(tail, out.Offset)
	}
	if out.Lost != 0 {
		tail = protowire.AppendTag(tail, 4, protowire.VarintType)
		tail = protowire.AppendVarint(tail, out.Lost)
	}
	event := protowire.AppendTag(nil, 2, protowire.BytesType) // ProcessEvent.output
	event = protowire.AppendVarint(event, uint64(len(head)+len(out.Data)+len(tail)))
	return mem.BufferSlice{mem.SliceBuffer(append(event, head...)), mem.SliceBuffer(out.Data), mem.SliceBuffer(tail)}
}
