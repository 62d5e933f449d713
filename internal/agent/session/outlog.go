package session

import (
	"context"
	"slices"
	"sort"
	"sync"
)

// Stream tells stdout from stderr in a session's output.
type Stream int

const (
	Stdout Stream = 1
	Stderr Stream = 2
)

// Chunk is a piece of a session's output. Offset is the position of Data[0] in the
// session's combined output (both streams, in the order the agent read them).
type Chunk struct {
	Stream Stream
	Offset uint64
	Data   []byte
	// Lost counts bytes before Offset that the reader never saw: the log dropped them
	// because nobody was attached while they went by.
	Lost uint64
}

func (c Chunk) end() uint64 { return c.Offset + uint64(len(c.Data)) }

// outputLog holds a session's recent output for replay and hands it to attached readers.
//
// It is bounded: when it is full, the oldest chunks go, but only once every attached reader
// has read them. A writer that would drop unread bytes waits instead, which stops the pump,
// which fills the pipe, which blocks the process: backpressure end to end, so an attached
// client never loses output however fast the process writes. With nobody attached (and once
// the first reader has come, see holdFirst) the log keeps only the most recent output.
type outputLog struct {
	mu       sync.Mutex
	changed  chan struct{} // closed and replaced whenever anything below changes
	chunks   []Chunk
	held     int    // bytes in chunks
	capacity int    // bytes
	start    uint64 // offset of the oldest byte held
	end      uint64 // offset after the newest byte
	closed   bool
	readers  map[*reader]struct{}
	// holdFirst makes the writer wait for the first reader instead of dropping output,
	// so a command started before its client connects loses nothing.
	holdFirst bool
	attached  bool
}

type reader struct {
	pos  uint64
	lost uint64 // bytes skipped but not yet reported
}

func newOutputLog(capacity int, holdFirst bool) *outputLog {
	return &outputLog{
		changed:   make(chan struct{}),
		capacity:  capacity,
		readers:   make(map[*reader]struct{}),
		holdFirst: holdFirst,
	}
}

// broadcast wakes every waiter; callers hold l.mu.
func (l *outputLog) broadcast() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// append adds data, waiting while that would drop bytes an attached reader has not read.
// It returns ctx's error if ctx ends first.
func (l *outputLog) append(ctx context.Context, s Stream, data []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for !l.evictFor(len(data)) {
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			l.mu.Lock()
			return ctx.Err()
		}
		l.mu.Lock()
	}
	l.chunks = append(l.chunks, Chunk{Stream: s, Offset: l.end, Data: data})
	l.end += uint64(len(data))
	l.held += len(data)
	l.broadcast()
	return nil
}

// evictFor drops the oldest chunks until n more bytes fit, and reports whether they do.
// A chunk an attached reader still needs is never dropped.
func (l *outputLog) evictFor(n int) bool {
	for l.held+n > l.capacity && len(l.chunks) > 0 {
		oldest := l.chunks[0]
		if !l.evictable(oldest) {
			return false
		}
		l.chunks[0] = Chunk{}
		l.chunks = l.chunks[1:]
		l.held -= len(oldest.Data)
		l.start = oldest.end()
	}
	return true
}

func (l *outputLog) evictable(c Chunk) bool {
	if l.holdFirst && !l.attached {
		return false
	}
	for r := range l.readers {
		if r.pos < c.end() {
			return false
		}
	}
	return true
}

// close marks the end of output: readers get what is left, then io.EOF.
func (l *outputLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.broadcast()
}

// attach registers a reader starting at offset; it counts for backpressure until detach.
func (l *outputLog) attach(offset uint64) *reader {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := &reader{pos: offset}
	l.readers[r] = struct{}{}
	l.attached = true
	l.broadcast()
	return r
}

func (l *outputLog) detach(r *reader) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.readers, r)
	l.evictFor(0)
	l.broadcast()
}

// shrink lowers the log's capacity to n bytes and drops the oldest output past it, sparing
// what attached readers still need (detach drops that later). Unlike eviction for new
// output, it cuts into the oldest chunk it keeps rather than drop a chunk larger than n.
func (l *outputLog) shrink(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.capacity = n
	for l.held > n && len(l.chunks) > 0 && l.evictable(l.chunks[0]) {
		c := &l.chunks[0]
		excess := l.held - n
		if excess >= len(c.Data) {
			l.held -= len(c.Data)
			l.start = c.end()
			l.chunks = l.chunks[1:]
			continue
		}
		c.Data = slices.Clone(c.Data[excess:]) // and let go of the larger array
		c.Offset += uint64(excess)
		l.held -= excess
		l.start = c.Offset
	}
}

// next returns the output after r's position, waiting for some if there is none yet.
// ok is false when the log is closed and r has read everything.
func (l *outputLog) next(ctx context.Context, r *reader) (c Chunk, ok bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if c, found := l.chunkAt(r); found {
			r.pos = c.end()
			l.broadcast()
			return c, true, nil
		}
		if l.closed {
			return Chunk{}, false, nil
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			l.mu.Lock()
			return Chunk{}, false, ctx.Err()
		}
		l.mu.Lock()
	}
}

// chunkAt finds the output at r.pos, skipping (and counting) bytes no longer held.
func (l *outputLog) chunkAt(r *reader) (Chunk, bool) {
	if r.pos < l.start {
		r.lost += l.start - r.pos
		r.pos = l.start
	}
	i := sort.Search(len(l.chunks), func(i int) bool { return l.chunks[i].end() > r.pos })
	if i == len(l.chunks) {
		return Chunk{}, false
	}
	c := l.chunks[i]
	lost := r.lost
	r.lost = 0
	return Chunk{Stream: c.Stream, Offset: r.pos, Data: c.Data[r.pos-c.Offset:], Lost: lost}, true
}

// tail copies the last n bytes (at most) the log holds, and says whether more was ever
// written than it copied.
func (l *outputLog) tail(n int) (out []byte, cut bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var parts [][]byte
	for i := len(l.chunks) - 1; i >= 0 && n > 0; i-- {
		d := l.chunks[i].Data
		if len(d) > n {
			d = d[len(d)-n:]
		}
		parts = append(parts, d)
		n -= len(d)
	}
	for i := len(parts) - 1; i >= 0; i-- {
		out = append(out, parts[i]...)
	}
	return out, l.end > uint64(len(out))
}
