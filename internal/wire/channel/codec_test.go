package channel

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// FuzzChannelCodecOutput: the hand-framed output event must be exactly what protobuf
// would send, for any field values.
func FuzzChannelCodecOutput(f *testing.F) {
	f.Add(int32(1), uint64(0), uint64(0), 20000)
	f.Add(int32(2), uint64(1)<<40, uint64(7), 1<<20)
	f.Add(int32(0), uint64(3), uint64(0), 16<<10)
	f.Add(int32(1), uint64(9), uint64(1), 5)
	f.Fuzz(func(t *testing.T, stream int32, offset, lost uint64, n int) {
		if n < 0 || n > 2<<20 {
			return
		}
		out := &pb.Output{Stream: pb.Stream(stream), Data: bytes.Repeat([]byte{'x'}, n), Offset: offset, Lost: lost}
		ev := &pb.ProcessEvent{Event: &pb.ProcessEvent_Output{Output: out}}
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Codec{}.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Materialize(), want) {
			t.Fatalf("framing of %+v differs from protobuf's", out)
		}
	})
}
