package channel

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// bufferPool is grpc's buffer pool for the agent's channel, without the zeroing: grpc's
// default pool clears every buffer it hands out, a memclr of each megabyte of output on
// both ends of the channel. grpc fills a buffer before it exposes any of it, and both ends
// of this channel are paddock (the host and its agent), so there is nothing to hide from
// anyone by zeroing.
type bufferPool struct {
	// classes[i] holds buffers of capacity 1<<(i+minShift).
	classes [maxShift - minShift + 1]sync.Pool
}

const (
	minShift = 9  // 512 bytes
	maxShift = 24 // 16 MiB: larger buffers are not pooled
)

var _ mem.BufferPool = (*bufferPool)(nil)

// Buffers is the channel's buffer pool, on both ends; a Framed message may hand grpc a
// buffer of it to return once written.
var Buffers mem.BufferPool = &bufferPool{}

func class(size int) int {
	if size <= 1<<minShift {
		return 0
	}
	return bits.Len(uint(size-1)) - minShift
}

// Get returns a buffer of length size; its contents are whatever it last held.
func (p *bufferPool) Get(size int) *[]byte {
	c := class(size)
	if c >= len(p.classes) {
		b := make([]byte, size)
		return &b
	}
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		*b = (*b)[:size]
		return b
	}
	b := make([]byte, size, 1<<(c+minShift))
	return &b
}

// Put returns a buffer for reuse.
func (p *bufferPool) Put(b *[]byte) {
	c := class(cap(*b))
	if c < len(p.classes) && cap(*b) == 1<<(c+minShift) {
		p.classes[c].Put(b)
	}
}
