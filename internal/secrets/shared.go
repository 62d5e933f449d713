package secrets

import (
	"context"
	"errors"
	"fmt"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store"
)

// adShared is the associated data's domain of a shared value, apart from a secret's and
// a key check's.
const adShared = "paddock shared value v1\x00"

func sharedAD(name string) []byte { return append([]byte(adShared), name...) }

// Shared returns the server's own value name (not a user's), sealed in the database
// under the keyring: every process on the database (every replica) gets the same one.
// When the database has none yet, mk makes it, and made says so: the first to ask
// makes it, in a write transaction, so replicas starting together agree. A stored value
// that does not open under the keyring is [errdefs.ErrDataLoss], naming only the value.
func (s *Secrets) Shared(ctx context.Context, name string, mk func() ([]byte, error)) (v Value, made bool, err error) {
	err = s.st.Update(ctx, func(tx *store.Tx) error {
		row, err := tx.SealedValue(ctx, name)
		if err == nil {
			ring, err := s.ringWith(ctx, name, row.KeyVersion)
			if err != nil {
				return err
			}
			pt, err := ring.open(row.KeyVersion, row.Nonce, row.Ciphertext, sharedAD(name))
			if err != nil {
				return fmt.Errorf("the server's %s in the database does not decrypt under key version %d: it was altered or copied: %w",
					name, row.KeyVersion, errdefs.ErrDataLoss)
			}
			v = Value{b: pt}
			return nil
		}
		if !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
		pt, err := mk()
		if err != nil {
			return fmt.Errorf("make the server's %s: %w", name, err)
		}
		ring, err := s.current(ctx, tx)
		if err != nil {
			return err
		}
		row = store.SealedValue{Name: name, KeyVersion: ring.primary, CreatedAt: s.now()}
		row.Nonce, row.Ciphertext = ring.seal(ring.primary, sharedAD(name), pt)
		if err := tx.PutSealedValue(ctx, row); err != nil {
			return err
		}
		v, made = Value{b: pt}, true
		return tx.AppendAudit(ctx, store.AuditEvent{At: s.now(), Action: "server.shared_value.make", Target: name})
	})
	return v, made, err
}

// reencryptShared moves every shared value not under ring's primary under it.
func (s *Secrets) reencryptShared(ctx context.Context, tx *store.Tx, ring *keyring) (int, error) {
	names, err := tx.SealedNotUnderKey(ctx, ring.primary)
	if err != nil {
		return 0, err
	}
	for _, name := range names {
		row, err := tx.SealedValue(ctx, name)
		if err != nil {
			return 0, err
		}
		pt, err := ring.open(row.KeyVersion, row.Nonce, row.Ciphertext, sharedAD(name))
		if err != nil {
			return 0, fmt.Errorf("the server's %s does not decrypt under key version %d: %w", name, row.KeyVersion, errdefs.ErrDataLoss)
		}
		row.KeyVersion = ring.primary
		row.Nonce, row.Ciphertext = ring.seal(ring.primary, sharedAD(name), pt)
		if err := tx.PutSealedValue(ctx, row); err != nil {
			return 0, err
		}
	}
	return len(names), nil
}
