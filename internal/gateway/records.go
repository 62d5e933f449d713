package gateway

import (
	"context"
	"sync"
)

// records tracks the usage records under way: the gateway writes an answer's usage to the
// ledger after the answer's end has reached the client, so that the client can send its
// next request on the same connection at once, and the next budget check of that user on
// that provider waits for those records first, so that it counts the same as if they had
// been written before the answer ended.
type records struct {
	mu      sync.Mutex
	pending map[ledgerKey]*pendingRecords
	closed  bool // after Close: records are written in line
	all     sync.WaitGroup
}

// pendingRecords are one user's records under way on one provider; idle is closed when
// the last of them is written.
type pendingRecords struct {
	n    int
	idle chan struct{}
}

// start runs record in the background, as one of k's records, or in line once the
// gateway is closed.
func (rs *records) start(k ledgerKey, record func()) {
	rs.mu.Lock()
	if rs.closed {
		rs.mu.Unlock()
		record()
		return
	}
	if rs.pending == nil {
		rs.pending = map[ledgerKey]*pendingRecords{}
	}
	p := rs.pending[k]
	if p == nil {
		p = &pendingRecords{idle: make(chan struct{})}
		rs.pending[k] = p
	}
	p.n++
	rs.all.Add(1)
	rs.mu.Unlock()
	go func() {
		defer rs.all.Done()
		defer rs.done(k, p)
		record()
	}()
}

func (rs *records) done(k ledgerKey, p *pendingRecords) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if p.n--; p.n == 0 {
		close(p.idle)
		delete(rs.pending, k)
	}
}

// wait returns when k's records started so far are written (or have failed, which the
// record logs), or with ctx's error.
func (rs *records) wait(ctx context.Context, k ledgerKey) error {
	rs.mu.Lock()
	p := rs.pending[k]
	rs.mu.Unlock()
	if p == nil {
		return nil
	}
	select {
	case <-p.idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close waits for every record under way; records started after it are written in line.
func (rs *records) close() {
	rs.mu.Lock()
	rs.closed = true
	rs.mu.Unlock()
	rs.all.Wait()
}
