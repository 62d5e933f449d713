package store

import (
	"context"
	"fmt"
	"sync"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// auditQueue holds the events recorded with AuditLater until a background writer
// commits them, as many to a transaction as have queued since the last.
type auditQueue struct {
	start sync.Once
	mu    sync.Mutex
	rows  []queuedAudit
	// queued counts the events ever queued, done those of them written (or failed);
	// progress is closed, and replaced, whenever done grows.
	queued, done uint64
	progress     chan struct{}
	kick         chan struct{} // one buffered wake-up for the writer
	closed       bool
	stopped      chan struct{} // closed when the writer has drained the queue and ended
}

type queuedAudit struct {
	row    auditRow
	failed func(error)
}

// AuditLater records e in the audit log after it returns: a writer in the background
// commits it with whatever else has queued, and calls failed (if not nil) should that
// commit fail. It is for the records of operations already done, whose answer should not
// wait for a commit to reach the disk (an fsync per write under synchronous=FULL). A
// listing of the log waits for the events queued before it, and Close commits the rest;
// a crash of the process loses what was still queued, a few milliseconds' worth. An
// event that cannot be recorded (no action, a detail that is no JSON) is an error now.
func (s *Store) AuditLater(e AuditEvent, failed func(error)) error {
	row, err := newAuditRow(e)
	if err != nil {
		return err
	}
	q := &s.audit
	q.start.Do(func() {
		q.mu.Lock()
		q.progress, q.kick, q.stopped = make(chan struct{}), make(chan struct{}, 1), make(chan struct{})
		q.mu.Unlock()
		go s.writeAudit()
	})
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return fmt.Errorf("record %s: the store is closed: %w", e.Action, errdefs.ErrUnavailable)
	}
	q.rows = append(q.rows, queuedAudit{row: row, failed: failed})
	q.queued++
	q.mu.Unlock()
	select {
	case q.kick <- struct{}{}:
	default:
	}
	return nil
}

// writeAudit commits the queue's events until the queue is closed and empty.
func (s *Store) writeAudit() {
	q := &s.audit
	defer close(q.stopped)
	for {
		q.mu.Lock()
		for len(q.rows) == 0 && !q.closed {
			q.mu.Unlock()
			<-q.kick
			q.mu.Lock()
		}
		batch := q.rows
		q.rows = nil
		q.mu.Unlock()
		if len(batch) == 0 {
			return // closed, and nothing left
		}
		err := s.Update(context.Background(), func(tx *Tx) error {
			for _, e := range batch {
				if err := tx.appendAuditRow(context.Background(), e.row); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			for _, e := range batch {
				if e.failed != nil {
					e.failed(err)
				}
			}
		}
		q.mu.Lock()
		q.done += uint64(len(batch))
		close(q.progress)
		q.progress = make(chan struct{})
		q.mu.Unlock()
	}
}

// flushAudit returns once the events queued before it are written, or ctx ends.
func (s *Store) flushAudit(ctx context.Context) error {
	q := &s.audit
	q.mu.Lock()
	defer q.mu.Unlock()
	for want := q.queued; q.done < want; {
		wait := q.progress
		q.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			q.mu.Lock()
			return fmt.Errorf("wait for queued audit events: %w", ctx.Err())
		}
		q.mu.Lock()
	}
	return nil
}

// closeAudit commits what is queued and stops the writer; AuditLater fails after it.
func (s *Store) closeAudit() {
	q := &s.audit
	q.mu.Lock()
	started := q.stopped != nil
	q.closed = true
	q.mu.Unlock()
	if !started {
		return
	}
	select {
	case q.kick <- struct{}{}:
	default:
	}
	<-q.stopped
}
