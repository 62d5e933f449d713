package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"syscall"

	"github.com/paddockhq/paddock/internal/capability"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
	"github.com/paddockhq/paddock/internal/wire/agentv1"
)

func (s *Service) read(ctx context.Context, req *agentv1.ReadRequest, send func(*agentv1.FileChunk) error) error {
	p := req.GetPath()
	if req.GetOffset() > math.MaxInt64 {
		return fmt.Errorf("read %q: offset %d is too large: %w", p, req.GetOffset(), errdefs.ErrInvalidArgument)
	}
	f, err := s.openRegular(p)
	if err != nil {
		return err
	}
	defer f.Close()
	off := int64(req.GetOffset())
	n := readLength(off, req.GetLength())
	if g := grantOf(req); g.Set() {
		if n, err = s.allowRead(ctx, g, p, f, off, n); err != nil {
			return err
		}
	}
	r := io.NewSectionReader(f, off, n)
	if req.GetEtag() && off == 0 && req.GetLength() == 0 {
		// The tag is of the bytes as they were hashed: a change meanwhile makes a later
		// If-Match fail, never pass.
		tag, err := etagOf(r)
		if err != nil {
			return s.fsError("read", p, err)
		}
		if _, err := r.Seek(0, io.SeekStart); err != nil {
			return s.fsError("read", p, err)
		}
		err = sendChunks(ctx, r, off, func(c *agentv1.FileChunk) error {
			c.Etag, tag = tag, ""
			return send(c)
		})
		if err == nil && tag != "" { // an empty file: one empty chunk carries its tag
			err = send(&agentv1.FileChunk{Etag: tag})
		}
		return s.fsError("read", p, err)
	}
	return s.fsError("read", p, sendChunks(ctx, r, off, send))
}

// allowRead verifies token for reading the file f is open on, and returns how many bytes
// from off it allows: those the file holds now, at most n. The read stops there, so that
// a file that grows meanwhile sends no more than was verified.
func (s *Service) allowRead(ctx context.Context, g Grant, p string, f *os.File, off, n int64) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, s.fsError("read", p, err)
	}
	n = min(n, max(fi.Size()-off, 0))
	if err := s.allowFile(ctx, g, "read", p, capability.Read, f, n); err != nil {
		return 0, err
	}
	return n, nil
}

// sendChunks sends r in chunks of ChunkSize, each a fresh buffer since gRPC may still hold
// the last one. off is r's offset in the file.
func sendChunks(ctx context.Context, r io.Reader, off int64, send func(*agentv1.FileChunk) error) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		buf := make([]byte, ChunkSize)
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if err := send(&agentv1.FileChunk{Data: buf[:n], Offset: uint64(off)}); err != nil {
				return err
			}
			off += int64(n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// readLength is how many bytes past off to read: length, or to EOF when length is 0 or
// reaches past what a file can hold.
func readLength(off int64, length uint64) int64 {
	room := uint64(math.MaxInt64 - off)
	if length == 0 || length > room {
		return int64(room)
	}
	return int64(length)
}

// openRegular opens the regular file at the caller's path p for reading. O_NONBLOCK keeps a
// FIFO planted in the workspace from blocking the open; the check after it refuses
// anything but a regular file, on the descriptor itself so no swap can slip past.
func (s *Service) openRegular(p string) (*os.File, error) {
	rel, err := wire.ResolvePath(p)
	if err != nil {
		return nil, err
	}
	f, err := s.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, s.fsError("read", p, err)
	}
	fi, err := f.Stat()
	switch {
	case err != nil:
		err = s.fsError("read", p, err)
	case fi.IsDir():
		err = fmt.Errorf("read %q: is a directory (use List): %w", p, errdefs.ErrInvalidArgument)
	case !fi.Mode().IsRegular():
		err = fmt.Errorf("read %q: not a regular file: %w", p, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
