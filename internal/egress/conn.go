package egress

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// activity is the clock an exchange's idle timeout runs on: when a byte last moved in
// either direction. Both sides of an exchange share one, so a long download does not
// time out its silent upload direction.
type activity struct{ last atomic.Int64 } // unix nanoseconds

func (a *activity) touch(now time.Time) { a.last.Store(now.UnixNano()) }

func (a *activity) idleFor(now time.Time) time.Duration {
	return time.Duration(now.UnixNano() - a.last.Load())
}

// conn is a connection with the proxy's limits on it. With idle set, every Read and
// Write runs under a deadline of idle from now (refreshed at most every idle/16, so
// deadlines cost little on a fast stream), and a deadline that expires while the other
// direction is still moving bytes is extended rather than obeyed. With limit ≥ 0, Read
// returns io.EOF once limit bytes have been read: that is how request headers are
// bounded.
//
// One goroutine may read while another writes; the fields each side touches are its own.
type conn struct {
	net.Conn
	idle time.Duration // 0: the caller manages deadlines
	act  *activity

	readAt, writeAt time.Time // when each deadline was last set
	limit           int64     // bytes Read may still return; < 0: unlimited
	hitLimit        bool
}

func newConn(c net.Conn) *conn { return &conn{Conn: c, limit: -1} }

// setIdle puts the connection under the idle timeout d, on the shared clock act.
func (c *conn) setIdle(d time.Duration, act *activity) {
	c.idle, c.act = d, act
	c.readAt, c.writeAt = time.Time{}, time.Time{}
	act.touch(time.Now())
}

// setFixed takes the connection out of idle mode and gives its reads the deadline t.
func (c *conn) setFixed(t time.Time) {
	c.idle, c.act = 0, nil
	_ = c.Conn.SetReadDeadline(t)
	_ = c.Conn.SetWriteDeadline(time.Time{})
}

func (c *conn) Read(b []byte) (int, error) {
	if c.limit == 0 {
		c.hitLimit = true
		return 0, io.EOF
	}
	if c.limit > 0 && int64(len(b)) > c.limit {
		b = b[:c.limit]
	}
	for {
		if c.idle > 0 {
			c.refresh(&c.readAt, c.Conn.SetReadDeadline)
		}
		n, err := c.Conn.Read(b)
		if c.limit > 0 {
			c.limit -= int64(n)
		}
		if c.idle > 0 {
			now := time.Now()
			if n > 0 {
				c.act.touch(now)
			} else if isTimeout(err) && c.act.idleFor(now) < c.idle {
				c.readAt = time.Time{}
				continue // the other direction is alive
			}
		}
		return n, err
	}
}

func (c *conn) Write(b []byte) (int, error) {
	done := 0
	for {
		if c.idle > 0 {
			c.refresh(&c.writeAt, c.Conn.SetWriteDeadline)
		}
		n, err := c.Conn.Write(b[done:])
		done += n
		if c.idle > 0 {
			now := time.Now()
			if n > 0 {
				c.act.touch(now)
			}
			if isTimeout(err) && done < len(b) && c.act.idleFor(now) < c.idle {
				c.writeAt = time.Time{}
				continue
			}
		}
		return done, err
	}
}

// refresh sets a deadline of idle from now when the last one was set over idle/16 ago.
func (c *conn) refresh(at *time.Time, set func(time.Time) error) {
	now := time.Now()
	if now.Sub(*at) > c.idle/16 {
		*at = now
		_ = set(now.Add(c.idle))
	}
}

// closeWrite half-closes the connection where it can (TCP, Unix), so the peer reads EOF
// while its own direction keeps going; elsewhere it closes it.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		if cw.CloseWrite() == nil {
			return
		}
	}
	_ = c.Close()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// bufPool holds the copy buffers: large enough that a fast stream costs few system
// calls, pooled so that idle connections hold none.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// pipe copies src to dst until src ends, adding each chunk to count and calling onBytes
// with it as it goes (so counters move during a long download, not only at its end). A
// clean end of src returns nil.
func pipe(dst io.Writer, src io.Reader, count *atomic.Int64, onBytes func(int)) error {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
			count.Add(int64(n))
			onBytes(n)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// stream copies src to dst — until src's EOF when n < 0, else exactly n bytes — in the
// kernel where it can (spliceCopy), else through a buffer.
func stream(dst, src *conn, n int64, count *atomic.Int64, onBytes func(int)) error {
	if handled, err := spliceCopy(dst, src, n, count, onBytes); handled {
		return err
	}
	var r io.Reader = src
	if n >= 0 {
		r = &exactReader{r: src, n: n}
	}
	return pipe(dst, r, count, onBytes)
}

// copyBody copies a body of n bytes (n < 0: until EOF) whose start br has buffered from
// src: the buffered bytes first, then the rest straight from src.
func copyBody(dst, src *conn, br *bufio.Reader, n int64, count *atomic.Int64, onBytes func(int)) error {
	if k := br.Buffered(); k > 0 && n != 0 {
		if n > 0 && int64(k) > n {
			k = int(n)
		}
		b, _ := br.Peek(k)
		if _, err := dst.Write(b); err != nil {
			return err
		}
		_, _ = br.Discard(k)
		count.Add(int64(k))
		onBytes(k)
		if n > 0 {
			n -= int64(k)
		}
	}
	if n == 0 {
		return nil
	}
	return stream(dst, src, n, count, onBytes)
}
