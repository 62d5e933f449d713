package broker

import (
	"context"
	"fmt"
	"sync"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store"
)

// committer writes the broker's records (leases and audit events) with group commit:
// writes that arrive while a commit is under way wait and go together in the next
// transaction. Every decision must be durable before the sandbox hears of it, and one
// synchronous SQLite commit costs a disk flush; sharing it between concurrent decisions is what lets the broker answer several sandboxes at
// once. A batch that fails is retried one write at a time, so that one bad write fails
// alone.
type committer struct {
	st   *store.Store
	ops  chan commitOp
	stop chan struct{} // closed by close
	once sync.Once
	done chan struct{} // closed when run has returned
}

type commitOp struct {
	fn   func(*store.Tx) error
	done chan error
}

// maxBatch bounds one transaction: a writer waits at most this many writes behind it.
const maxBatch = 64

func newCommitter(st *store.Store) *committer {
	c := &committer{st: st, ops: make(chan commitOp), stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

// write runs fn in a write transaction, perhaps together with others, and returns once it
// is committed (or failed). A write is never abandoned half-way for a caller that went
// away: the decision it records stands.
func (c *committer) write(fn func(*store.Tx) error) error {
	op := commitOp{fn: fn, done: make(chan error, 1)}
	select {
	case c.ops <- op:
		return <-op.done
	case <-c.stop:
		return fmt.Errorf("the broker is shutting down: %w", errdefs.ErrUnavailable)
	}
}

// close stops the committer once the writes under way are done.
func (c *committer) close() {
	c.once.Do(func() { close(c.stop) })
	<-c.done
}

func (c *committer) run() {
	defer close(c.done)
	batch := make([]commitOp, 0, maxBatch)
	for {
		var op commitOp
		select {
		case op = <-c.ops:
		case <-c.stop:
			return
		}
		batch = append(batch[:0], op)
	gather:
		for len(batch) < maxBatch {
			select {
			case op := <-c.ops:
				batch = append(batch, op)
			default:
				break gather
			}
		}
		c.commit(batch)
	}
}

func (c *committer) commit(batch []commitOp) {
	ctx := context.Background()
	err := c.st.Update(ctx, func(tx *store.Tx) error {
		for _, op := range batch {
			if err := op.fn(tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil || len(batch) == 1 {
		for _, op := range batch {
			op.done <- err
		}
		return
	}
	for _, op := range batch {
		op.done <- c.st.Update(ctx, op.fn)
	}
}
