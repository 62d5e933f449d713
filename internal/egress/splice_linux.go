package egress

import (
	"errors"
	"io"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	spliceMove     = 0x1 // SPLICE_F_MOVE
	spliceNonblock = 0x2 // SPLICE_F_NONBLOCK
	// spliceChunk is the most one splice(2) into the pipe asks for, and the size the pipe
	// is given (F_SETPIPE_SZ; the default, 64 KiB, where that is refused). 1 MiB, not the
	// default: a quarter of the splice calls and wake-ups per byte, which speeds a
	// plain-HTTP download through the proxy (table 13 of docs/benchmarks.md). It bounds
	// what a relay holds in the kernel: at most 1 MiB per direction of each open
	// transfer, and only while the receiving side is slower, beside the socket buffers'
	// own few MiB.
	spliceChunk = 1 << 20
)

// spliceCopy moves bytes from src to dst inside the kernel, through a pipe, when both are
// sockets it can splice (TCP, Unix stream): until src's EOF when n < 0, else exactly n
// bytes (an early EOF is io.ErrUnexpectedEOF). Bulk data then never crosses into the
// proxy's memory, which on a loaded host is the difference between a proxy that keeps up
// with a download and one that halves it. It keeps what pipe keeps: the idle timeout on
// both connections (deadlines through syscall.RawConn), the byte count and the counters
// as bytes move. handled is false, with nothing moved, when splicing is not possible;
// the caller then copies as usual.
func spliceCopy(dst, src *conn, n int64, count *atomic.Int64, onBytes func(int)) (handled bool, err error) {
	rsrc, rdst := rawConn(src, true), rawConn(dst, false)
	if rsrc == nil || rdst == nil || n == 0 {
		return false, nil
	}
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		return false, nil
	}
	defer syscall.Close(p[0])
	defer syscall.Close(p[1])
	_, _ = unix.FcntlInt(uintptr(p[0]), unix.F_SETPIPE_SZ, spliceChunk) // best effort
	moved := false
	for n != 0 {
		want := spliceChunk
		if n > 0 && n < int64(want) {
			want = int(n)
		}
		var got int64
		var serr error
		err := src.raw(rsrc, false, func(fd uintptr) bool {
			got, serr = syscall.Splice(int(fd), nil, p[1], nil, want, spliceMove|spliceNonblock)
			return serr != syscall.EAGAIN
		})
		if err == nil {
			err = serr
		}
		if err != nil {
			if !moved && (errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSYS)) {
				return false, nil // this kind of socket cannot be spliced
			}
			return true, err
		}
		if got == 0 {
			if n > 0 {
				return true, io.ErrUnexpectedEOF
			}
			return true, nil
		}
		moved = true
		src.act.touch(time.Now())
		for got > 0 {
			var put int64
			err := dst.raw(rdst, true, func(fd uintptr) bool {
				put, serr = syscall.Splice(p[0], nil, int(fd), nil, int(got), spliceMove|spliceNonblock)
				return serr != syscall.EAGAIN
			})
			if err == nil {
				err = serr
			}
			if err != nil {
				return true, err
			}
			got -= put
			if n > 0 {
				n -= put
			}
			count.Add(put)
			onBytes(int(put))
			dst.act.touch(time.Now())
		}
	}
	return true, nil
}

// rawConn is c's syscall.RawConn when c is in idle mode over a socket (and, for reading,
// has no read limit on), else nil. Only the reading side may look at the limit: another
// goroutine may be setting it to read headers while this one writes.
func rawConn(c *conn, reading bool) syscall.RawConn {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok || c.idle <= 0 || (reading && c.limit >= 0) {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// raw runs f on the socket under the idle deadline, as Read and Write do: a deadline that
// expires while the other direction is moving bytes is extended, not obeyed.
func (c *conn) raw(rc syscall.RawConn, write bool, f func(fd uintptr) bool) error {
	at, set, do := &c.readAt, c.Conn.SetReadDeadline, rc.Read
	if write {
		at, set, do = &c.writeAt, c.Conn.SetWriteDeadline, rc.Write
	}
	for {
		c.refresh(at, set)
		err := do(f)
		if isTimeout(err) && c.act.idleFor(time.Now()) < c.idle {
			*at = time.Time{}
			continue
		}
		return err
	}
}
