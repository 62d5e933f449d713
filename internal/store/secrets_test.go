package store

import (
	"context"
	"errors"
	"testing"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// The secrets tables' invariants, whatever package secrets does: a row's key version has
// a key check, a re-encryption loses to a put that came first, listings carry no
// ciphertext, and a user's secrets go with the user.
func TestSecretRows(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		s := db.open(t)
		ctx := context.Background()
		alice, bob := mustUser(t, s, "alice"), mustUser(t, s, "bob")
		row := func(user User, name string, version int64, key int) SecretRow {
			return SecretRow{UserID: user.ID, Name: name, Version: version, KeyVersion: key, Nonce: []byte("n"), Ciphertext: []byte("c" + name), CreatedAt: t0, UpdatedAt: t0}
		}
		update := func(fn func(tx *Tx) error) error { return s.Update(ctx, fn) }

		if err := update(func(tx *Tx) error { return tx.PutSecret(ctx, row(alice, "a", 1, 1)) }); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("a row under a key version without a key check: %v, want not found", err)
		}
		if err := update(func(tx *Tx) error {
			for v := 1; v <= 2; v++ {
				if err := tx.AddSecretKeyCheck(ctx, SecretKeyCheck{Version: v, Nonce: []byte("n"), Check: []byte("c"), CreatedAt: t0}); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := update(func(tx *Tx) error {
			return tx.AddSecretKeyCheck(ctx, SecretKeyCheck{Version: 1, Nonce: []byte("n"), Check: []byte("c")})
		}); !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Fatalf("a second key check for version 1: %v", err)
		}
		err := update(func(tx *Tx) error {
			for _, r := range []SecretRow{row(alice, "b", 1, 1), row(alice, "a", 1, 1), row(bob, "a", 1, 2)} {
				if err := tx.PutSecret(ctx, r); err != nil {
					return err
				}
			}
			r := row(alice, "a", 2, 1)
			r.CreatedAt = t0.Add(1) // a put keeps the row's created_at
			return tx.PutSecret(ctx, r)
		})
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Secret(ctx, alice.ID, "a")
		if err != nil || got.Version != 2 || !got.CreatedAt.Equal(t0) || string(got.Ciphertext) != "ca" {
			t.Fatalf("Secret: %+v, %v", got, err)
		}
		if _, err := s.Secret(ctx, bob.ID, "b"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("bob's b: %v", err)
		}
		list, err := s.ListSecrets(ctx, alice.ID)
		if err != nil || len(list) != 2 || list[0].Name != "a" || list[1].Name != "b" || list[0].Ciphertext != nil || list[0].Nonce != nil {
			t.Fatalf("ListSecrets: %+v, %v", list, err)
		}
		usage, err := s.SecretKeyUsage(ctx)
		if err != nil || usage[1] != 2 || usage[2] != 1 {
			t.Fatalf("usage %v, %v", usage, err)
		}
		err = update(func(tx *Tx) error {
			refs, err := tx.SecretsNotUnderKey(ctx, 2)
			if err != nil || len(refs) != 2 {
				t.Errorf("SecretsNotUnderKey(2): %+v, %v", refs, err)
			}
			// Re-encrypting version 1 of a, which a put has since made version 2, changes nothing.
			stale := row(alice, "a", 1, 2)
			if err := tx.ReencryptSecret(ctx, stale, 1); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("stale re-encryption: %v", err)
			}
			fresh := row(alice, "a", 2, 2)
			fresh.Ciphertext = []byte("re")
			if err := tx.ReencryptSecret(ctx, fresh, 1); err != nil {
				t.Errorf("re-encryption: %v", err)
			}
			if err := tx.ReencryptSecret(ctx, fresh, 1); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("the same re-encryption twice: %v", err)
			}
			if err := tx.DeleteSecret(ctx, bob.ID, "b"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("deleting a missing secret: %v", err)
			}
			return tx.DeleteSecret(ctx, alice.ID, "b")
		})
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Secret(ctx, alice.ID, "a"); got.KeyVersion != 2 || string(got.Ciphertext) != "re" || !got.UpdatedAt.Equal(t0) {
			t.Errorf("after re-encryption: %+v", got)
		}
		if _, err := s.w.Exec(`DELETE FROM users WHERE id = ?`, bob.ID); err != nil {
			t.Fatal(err)
		}
		if usage, _ := s.SecretKeyUsage(ctx); usage[2] != 1 || usage[1] != 0 {
			t.Errorf("after deleting bob: usage %v, want only alice's a under 2", usage)
		}
	})
}
