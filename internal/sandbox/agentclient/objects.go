package agentclient

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/paddockhq/paddock/internal/errdefs"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// A history's blobs travel from the agent for a copy made on this side (a backup). The
// agent is the sandbox's: what it sends is checked here before anyone uses it. A listing
// is bounded; a blob must come when asked, in order, exactly its listed size, and hash to
// its name.

// Blob is a blob of a sandbox's history store: its SHA-256 and its size.
type Blob struct {
	Sum  string
	Size int64
}

// readBatch is how many blobs one ReadObjects asks for.
const readBatch = 1024

// lied is the error of an answer the agent should not have given.
func lied(format string, args ...any) error {
	return fmt.Errorf("the sandbox's agent sent %s: %w", fmt.Sprintf(format, args...), errdefs.ErrFailedPrecondition)
}

// ListObjects lists the history's store: its index, at most maxIndex bytes, and at most
// maxBlobs blobs. The names and sizes are the agent's word: the caller checks them.
func (c *Client) ListObjects(ctx context.Context, maxIndex, maxBlobs int) ([]byte, []Blob, error) {
	s, err := c.history.Objects(ctx, &pb.ObjectsRequest{})
	if err != nil {
		return nil, nil, errdefs.FromGRPC(err)
	}
	return collectListing(func() (*pb.ObjectsChunk, error) { m, err := s.Recv(); return m, Err(err) }, maxIndex, maxBlobs)
}

// collectListing reads an Objects stream: the index on the first message only, then blobs.
func collectListing(next func() (*pb.ObjectsChunk, error), maxIndex, maxBlobs int) ([]byte, []Blob, error) {
	var index []byte
	var out []Blob
	for first := true; ; first = false {
		m, err := next()
		if errors.Is(err, io.EOF) {
			if first {
				return nil, nil, lied("an empty listing of its history")
			}
			return index, out, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("list the history's blobs: %w", err)
		}
		switch {
		case !first && len(m.GetIndex()) > 0:
			return nil, nil, lied("its history's index twice")
		case len(m.GetIndex()) > maxIndex:
			return nil, nil, lied("an index of %d bytes, over %d", len(m.GetIndex()), maxIndex)
		case len(out)+len(m.GetBlobs()) > maxBlobs:
			return nil, nil, lied("a listing of over %d blobs", maxBlobs)
		}
		if first {
			index = m.GetIndex()
		}
		for _, b := range m.GetBlobs() {
			out = append(out, Blob{Sum: b.GetSum(), Size: b.GetSize()})
		}
	}
}

// ReadBlobs asks the agent for the blobs want (names and sizes as listed), and calls fn
// with each whole once it is checked: named as asked, in order, of its listed size, at
// most maxSize bytes, hashing to its name. The first blob that is not is refused by name.
func (c *Client) ReadBlobs(ctx context.Context, want []Blob, maxSize int64, fn func(sum string, data []byte) error) error {
	for len(want) > 0 {
		batch := want[:min(readBatch, len(want))]
		want = want[len(batch):]
		sums := make([]string, len(batch))
		for i, b := range batch {
			sums[i] = b.Sum
		}
		rctx, cancel := context.WithCancel(ctx)
		s, err := c.history.ReadObjects(rctx, &pb.ReadObjectsRequest{Sums: sums})
		if err != nil {
			cancel()
			return errdefs.FromGRPC(err)
		}
		err = collectBlobs(func() (*pb.ObjectChunk, error) { m, err := s.Recv(); return m, Err(err) }, batch, maxSize, fn)
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// collectBlobs reads a ReadObjects stream of the blobs want.
func collectBlobs(next func() (*pb.ObjectChunk, error), want []Blob, maxSize int64, fn func(string, []byte) error) error {
	var pending *pb.ObjectChunk // a blob's first chunk, read ahead
	for _, b := range want {
		if b.Size < 0 || b.Size > maxSize {
			return lied("blob %.64q of %d bytes, over the bound of %d", b.Sum, b.Size, maxSize)
		}
		m := pending
		pending = nil
		if m == nil {
			var err error
			if m, err = next(); errors.Is(err, io.EOF) {
				return lied("fewer blobs than asked for: blob %s is missing", b.Sum)
			} else if err != nil {
				return fmt.Errorf("read blob %s: %w", b.Sum, err)
			}
		}
		switch {
		case m.GetSum() != b.Sum:
			return lied("blob %.64q where blob %s was asked for", m.GetSum(), b.Sum)
		case m.GetSize() != b.Size:
			return lied("blob %s of %d bytes, listed as %d", b.Sum, m.GetSize(), b.Size)
		}
		data := make([]byte, 0, min(b.Size, 1<<20))
		data = append(data, m.GetData()...)
		for {
			if int64(len(data)) > b.Size {
				return lied("blob %s: more than its %d bytes", b.Sum, b.Size)
			}
			m, err := next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return fmt.Errorf("read blob %s: %w", b.Sum, err)
			}
			if m.GetSum() != "" {
				pending = m
				break
			}
			data = append(data, m.GetData()...)
		}
		if int64(len(data)) != b.Size {
			return lied("blob %s: %d bytes of its %d", b.Sum, len(data), b.Size)
		}
		if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != b.Sum {
			return lied("blob %s with content that does not hash to it", b.Sum)
		}
		if err := fn(b.Sum, data); err != nil {
			return err
		}
	}
	if pending != nil {
		return lied("more blobs than asked for")
	}
	return nil
}
