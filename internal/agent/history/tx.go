package history

import (
	"fmt"
	"strconv"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Transaction is a multi-step change of the workspace (a build, a multi-file edit) that
// ends as one checkpoint (Commit) or as if it never happened (Rollback).
//
// While one is open, changes by anyone (not only the transaction's owner) are part of it:
// the workspace has one state, and Rollback restores it exactly as it was at Begin. The
// automatic checkpoints are suppressed meanwhile (see Checkpoint), and Restore, Undo, Redo
// and a manual checkpoint are refused: a restore inside the transaction would be undone by
// its rollback, or committed as the transaction's own work. Only one transaction is open at
// a time.
//
// A transaction does not outlive the History that began it: one still open when the store
// is next opened (its agent crashed or stopped) is rolled back by Open, since its work never
// reached a state its owner called whole (see Recovered).
type Transaction struct {
	ID      string `json:"id"`
	Message string `json:"message,omitempty"`
	// Base is the checkpoint the workspace was at when the transaction began.
	Base string    `json:"base"`
	Time time.Time `json:"time"`
	// Tree is the workspace exactly as it was at Begin, mtimes included, which Rollback
	// restores (Base's tree may differ from it in mtimes alone).
	Tree string `json:"tree"`
}

// Journal operations of transactions.
const (
	opCommit   = "commit"
	opRollback = "rollback"
)

// Begin opens a transaction. Changes not yet checkpointed are checkpointed first (cause
// watcher), so that the transaction's checkpoint holds its own work only. A second Begin
// fails with ErrFailedPrecondition naming the open transaction.
func (h *History) Begin(message string) (Transaction, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.finishPending(); err != nil {
		return Transaction{}, err
	}
	if h.idx.Tx != nil {
		return Transaction{}, h.txOpenErr("begin another")
	}
	if _, _, err := h.checkpoint(CauseWatcher, "changes found before a transaction", false); err != nil {
		return Transaction{}, err
	}
	// The scan's trees are stored only when it made a checkpoint; Rollback needs them.
	for _, data := range h.pending {
		_, n, err := h.blobs.put(data)
		if err != nil {
			return Transaction{}, fmt.Errorf("begin transaction (the workspace is untouched): %w", err)
		}
		h.size += n
	}
	tx := Transaction{ID: "tx" + strconv.Itoa(h.idx.TxSeq+1), Message: message, Base: h.idx.Pos,
		Time: h.now().UTC(), Tree: h.lastScan}
	h.idx.Tx, h.idx.TxSeq = &tx, h.idx.TxSeq+1
	if err := h.saveIndex(); err != nil {
		h.idx.Tx, h.idx.TxSeq = nil, h.idx.TxSeq-1
		return Transaction{}, fmt.Errorf("begin transaction: %w", err)
	}
	return tx, nil
}

// Tx returns the open transaction (false when none is).
func (h *History) Tx() (Transaction, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.idx.Tx == nil {
		return Transaction{}, false
	}
	return *h.idx.Tx, true
}

// Commit closes the open transaction, recording the workspace as one checkpoint of cause
// transaction with Begin's message; created is false when the transaction changed nothing
// (the current checkpoint is then returned). The workspace is not touched. A journal makes
// the commit whole across a crash: once it is written, Open finishes the commit.
func (h *History) Commit() (Checkpoint, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.finishPending(); err != nil {
		return Checkpoint{}, false, err
	}
	tx := h.idx.Tx
	if tx == nil {
		return Checkpoint{}, false, fmt.Errorf("commit: no transaction is open: %w", errdefs.ErrFailedPrecondition)
	}
	c, err := h.run(journal{Op: opCommit, Tx: tx.ID, Target: tx.Base, Seq: h.idx.Seq}, "")
	if err != nil {
		return Checkpoint{}, false, err
	}
	return c, c.Transaction == tx.ID, nil
}

// Rollback closes the open transaction by restoring the workspace exactly to its state at
// Begin, whoever changed it since, and returns the checkpoint the workspace is at again.
// Nothing is recorded in the timeline. Like a restore, it is journaled: a crash partway is
// finished by Open.
func (h *History) Rollback() (Checkpoint, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.finishPending(); err != nil {
		return Checkpoint{}, err
	}
	tx := h.idx.Tx
	if tx == nil {
		return Checkpoint{}, fmt.Errorf("rollback: no transaction is open: %w", errdefs.ErrFailedPrecondition)
	}
	// have "": the workspace was not scanned since Begin, so every directory is checked; the
	// stat cache, from Begin's scan, still skips every file left unchanged.
	return h.run(journal{Op: opRollback, Tx: tx.ID, Target: tx.Base, Tree: tx.Tree, Seq: h.idx.Seq}, "")
}

// applyCommit records the transaction's work. A commit already recorded (the crash came
// after the index was written) is found by its transaction being closed.
func (h *History) applyCommit(j journal) (Checkpoint, error) {
	tx := h.idx.Tx
	if tx == nil || tx.ID != j.Tx {
		return h.committed(j.Tx), nil
	}
	tree, sc, err := h.scan()
	if err != nil {
		return Checkpoint{}, fmt.Errorf("commit %s (the transaction is still open): %w", j.Tx, err)
	}
	base, _ := h.get(tx.Base)
	d, err := h.diffTrees(base.Tree, tree)
	if err != nil {
		return Checkpoint{}, err
	}
	c := base
	if !d.empty() || tx.Base == "" {
		message := tx.Message
		if message == "" {
			message = "transaction " + tx.ID
		}
		if c, err = h.record(tree, sc, CauseTransaction, message, ""); err != nil {
			return Checkpoint{}, fmt.Errorf("commit %s (the transaction is still open): %w", j.Tx, err)
		}
		h.idx.Checkpoints[len(h.idx.Checkpoints)-1].Transaction = tx.ID
		c.Transaction = tx.ID
		if len(h.idx.Redo) > 0 {
			h.idx.Redo, h.idx.ForkedBy = nil, c.ID
		}
		h.idx.Pos = c.ID
	} else if err := h.saveCache(sc); err != nil {
		return Checkpoint{}, err
	}
	if err := h.step(); err != nil { // a crash with the commit's blobs stored, not recorded
		return Checkpoint{}, err
	}
	h.idx.Tx = nil
	return c, h.saveIndex()
}

// committed is the checkpoint transaction id's commit made, or the current one if it
// changed nothing.
func (h *History) committed(id string) Checkpoint {
	for i := len(h.idx.Checkpoints) - 1; i >= 0; i-- {
		if c := h.idx.Checkpoints[i]; c.Transaction == id {
			return c
		}
	}
	c, _ := h.get(h.idx.Pos)
	return c
}

// applyRollback restores the workspace to the transaction's state at Begin and closes it.
func (h *History) applyRollback(j journal, have string) (Checkpoint, error) {
	if tx := h.idx.Tx; tx == nil || tx.ID != j.Tx {
		c, _ := h.get(h.idx.Pos)
		return c, nil
	}
	if err := h.restoreTree(j.Tree, have); err != nil {
		return Checkpoint{}, fmt.Errorf("rollback of %s: %w (the journal will finish it when the history is next opened)", j.Tx, err)
	}
	// The scan refreshes the stat cache, so that the next checkpoint does not re-hash what
	// the rollback wrote.
	_, sc, err := h.scan()
	if err != nil {
		return Checkpoint{}, err
	}
	if err := h.saveCache(sc); err != nil {
		return Checkpoint{}, err
	}
	h.idx.Tx = nil
	c, _ := h.get(h.idx.Pos)
	return c, h.saveIndex()
}

// txOpenErr refuses op while a transaction is open, naming it.
func (h *History) txOpenErr(op string) error {
	return fmt.Errorf("cannot %s: %s is open: commit or roll it back first: %w", op, describeTx(*h.idx.Tx), errdefs.ErrFailedPrecondition)
}

func describeTx(tx Transaction) string {
	s := "transaction " + tx.ID
	if tx.Message != "" {
		s += fmt.Sprintf(" (%q)", tx.Message)
	}
	s += ", begun " + tx.Time.Format(time.RFC3339)
	if tx.Base != "" {
		s += " at checkpoint " + tx.Base
	}
	return s
}

// rollbackLeftOpen rolls back a transaction Open found open: its History is gone, so no
// one can commit it, and its work never reached a state its owner called whole.
func (h *History) rollbackLeftOpen() (string, error) {
	tx := *h.idx.Tx
	j := journal{Op: opRollback, Tx: tx.ID, Target: tx.Base, Tree: tx.Tree, Seq: h.idx.Seq}
	if _, err := h.run(j, ""); err != nil {
		return "", fmt.Errorf("roll back %s, left open when the history was last closed: %w", describeTx(tx), err)
	}
	return fmt.Sprintf("rolled back %s, left open when the history was last closed: the workspace is wholly its state at the transaction's start", describeTx(tx)), nil
}
