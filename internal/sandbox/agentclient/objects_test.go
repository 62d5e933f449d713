package agentclient

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/errdefs"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

func sumOf(b string) string {
	s := sha256.Sum256([]byte(b))
	return hex.EncodeToString(s[:])
}

// stream is a ReadObjects or Objects stream of msgs, then io.EOF.
func stream[T any](msgs ...*T) func() (*T, error) {
	return func() (*T, error) {
		if len(msgs) == 0 {
			return nil, io.EOF
		}
		m := msgs[0]
		msgs = msgs[1:]
		return m, nil
	}
}

// What an agent sends is taken only as asked: each blob named in order, of its listed
// size, within the bound, hashing to its name; anything else is refused naming the blob.
func TestCollectBlobs(t *testing.T) {
	a, b := "alpha\n", "bravo bravo\n"
	want := []Blob{{sumOf(a), int64(len(a))}, {sumOf(b), int64(len(b))}}
	head := func(sum string, size int64, data string) *pb.ObjectChunk {
		return &pb.ObjectChunk{Sum: sum, Size: size, Data: []byte(data)}
	}
	more := func(data string) *pb.ObjectChunk { return &pb.ObjectChunk{Data: []byte(data)} }
	for _, tc := range []struct {
		name string
		msgs []*pb.ObjectChunk
		max  int64
		says string // "" for a stream taken whole
	}{
		{"honest", []*pb.ObjectChunk{head(want[0].Sum, 6, "alp"), more("ha\n"), head(want[1].Sum, 12, b)}, 1 << 20, ""},
		{"wrong hash", []*pb.ObjectChunk{head(want[0].Sum, 6, "alpha!"), head(want[1].Sum, 12, b)}, 1 << 20, "does not hash to it"},
		{"another blob", []*pb.ObjectChunk{head(want[1].Sum, 12, b)}, 1 << 20, "where blob " + want[0].Sum},
		{"oversized", []*pb.ObjectChunk{head(want[0].Sum, 6, a), more("and more"), head(want[1].Sum, 12, b)}, 1 << 20, "more than its 6 bytes"},
		{"over the bound", []*pb.ObjectChunk{head(want[0].Sum, 6, a), head(want[1].Sum, 12, b)}, 8, "over the bound of 8"},
		{"resized", []*pb.ObjectChunk{head(want[0].Sum, 7, a)}, 1 << 20, "listed as 6"},
		{"short", []*pb.ObjectChunk{head(want[0].Sum, 6, "alp"), head(want[1].Sum, 12, b)}, 1 << 20, "3 bytes of its 6"},
		{"missing", []*pb.ObjectChunk{head(want[0].Sum, 6, a)}, 1 << 20, "blob " + want[1].Sum + " is missing"},
		{"extra", []*pb.ObjectChunk{head(want[0].Sum, 6, a), head(want[1].Sum, 12, b), head(want[0].Sum, 6, a)}, 1 << 20, "more blobs than asked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]string{}
			err := collectBlobs(stream(tc.msgs...), want, tc.max, func(sum string, data []byte) error {
				got[sum] = string(data)
				return nil
			})
			if tc.says == "" {
				if err != nil || got[want[0].Sum] != a || got[want[1].Sum] != b {
					t.Fatalf("%v, %q", err, got)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("%v, want a refusal saying %q", err, tc.says)
			}
			for sum, data := range got {
				if sumOf(data) != sum {
					t.Errorf("blob %s handed on with content that does not hash to it", sum)
				}
			}
		})
	}
}

// A listing: its index once, first, and within the bounds.
func TestCollectListing(t *testing.T) {
	ref := &pb.BlobRef{Sum: sumOf("a"), Size: 1}
	for _, tc := range []struct {
		name string
		msgs []*pb.ObjectsChunk
		says string
	}{
		{"honest", []*pb.ObjectsChunk{{Index: []byte("{}"), Blobs: []*pb.BlobRef{ref}}, {Blobs: []*pb.BlobRef{ref}}}, ""},
		{"empty", nil, "an empty listing"},
		{"index twice", []*pb.ObjectsChunk{{Index: []byte("{}")}, {Index: []byte("{}")}}, "index twice"},
		{"index too big", []*pb.ObjectsChunk{{Index: make([]byte, 65)}}, "over 64"},
		{"too many", []*pb.ObjectsChunk{{Index: []byte("{}"), Blobs: []*pb.BlobRef{ref, ref, ref}}}, "over 2 blobs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			index, blobs, err := collectListing(stream(tc.msgs...), 64, 2)
			if tc.says == "" {
				if err != nil || string(index) != "{}" || len(blobs) != 2 {
					t.Fatalf("%q %v %v", index, blobs, err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("%v, want a refusal saying %q", err, tc.says)
			}
		})
	}
}

// messages decodes fuzz bytes into a ReadObjects stream: each message a kind byte (odd:
// a blob's first chunk, with a 64-byte name and an 8-byte size), a length byte and data.
func messages(raw []byte) []*pb.ObjectChunk {
	var out []*pb.ObjectChunk
	for len(raw) >= 2 {
		m := &pb.ObjectChunk{}
		kind, n := raw[0], int(raw[1])
		raw = raw[2:]
		if kind%2 == 1 && len(raw) >= 72 {
			m.Sum, m.Size = string(raw[:64]), int64(binary.BigEndian.Uint64(raw[64:72]))
			raw = raw[72:]
		}
		n = min(n, len(raw))
		m.Data, raw = raw[:n], raw[n:]
		out = append(out, m)
	}
	return out
}

// FuzzCollectBlobs: any stream an agent sends is refused or taken, never a panic, and only
// content that hashes to its name, of its listed size, reaches the caller.
func FuzzCollectBlobs(f *testing.F) {
	a := "alpha\n"
	f.Add([]byte("\x01\x06"+sumOf(a)+"\x00\x00\x00\x00\x00\x00\x00\x06"+a), int64(6))
	f.Add([]byte("\x01\x03"+sumOf(a)+"\x00\x00\x00\x00\x00\x00\x00\x06alp\x00\x03ha\n"), int64(6))
	f.Add([]byte("\x01\x06"+sumOf(a)+"\xff\xff\xff\xff\xff\xff\xff\xffalpha!"), int64(-1))
	f.Fuzz(func(t *testing.T, raw []byte, size int64) {
		want := []Blob{{sumOf(a), size}}
		_ = collectBlobs(stream(messages(raw)...), want, 1<<20, func(sum string, data []byte) error {
			if sumOf(string(data)) != sum || int64(len(data)) != size {
				t.Fatalf("blob %s handed on: %d bytes of content that is not it", sum, len(data))
			}
			return nil
		})
	})
}

// FuzzCollectListing: any Objects stream is refused or taken within its bounds, never a
// panic.
func FuzzCollectListing(f *testing.F) {
	f.Add([]byte("\x02{}"), uint8(3))
	f.Add([]byte("\x00\x00"), uint8(0))
	f.Fuzz(func(t *testing.T, raw []byte, blobs uint8) {
		var msgs []*pb.ObjectsChunk
		for len(raw) > 0 {
			n := min(int(raw[0]), len(raw)-1)
			msgs = append(msgs, &pb.ObjectsChunk{Index: raw[1 : 1+n], Blobs: make([]*pb.BlobRef, int(blobs)%5)})
			for i := range msgs[len(msgs)-1].Blobs {
				msgs[len(msgs)-1].Blobs[i] = &pb.BlobRef{Sum: string(raw[1 : 1+n]), Size: int64(n)}
			}
			raw = raw[1+n:]
		}
		index, got, err := collectListing(stream(msgs...), 64, 8)
		if err == nil && (len(index) > 64 || len(got) > 8) {
			t.Fatalf("a listing over its bounds taken: %d bytes, %d blobs", len(index), len(got))
		}
	})
}
