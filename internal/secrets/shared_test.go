package secrets

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// A shared value is made once, by the first to ask, and read back by every later
// Secrets on the database; at rest it is sealed, bound to its name; a key rotation moves
// it under the new key, still readable; a ciphertext altered is data loss, naming it.
func TestSharedValue(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	makes := 0
	mk := func() ([]byte, error) { makes++; return []byte("the-shared-plaintext"), nil }
	v, made, err := e.s.Shared(ctx, "ca", mk)
	if err != nil || !made || string(v.Reveal()) != "the-shared-plaintext" {
		t.Fatalf("first Shared: %q %v %v", v.Reveal(), made, err)
	}
	other := e.mustOpen(t) // another replica on the database
	if v, made, err := other.Shared(ctx, "ca", mk); err != nil || made || string(v.Reveal()) != "the-shared-plaintext" || makes != 1 {
		t.Fatalf("second Shared: %q made %v, %v; %d makes", v.Reveal(), made, err, makes)
	}
	db := e.sql(t)
	var ct []byte
	if err := db.QueryRow(`SELECT ciphertext FROM sealed_values WHERE name = 'ca'`).Scan(&ct); err != nil || bytes.Contains(ct, []byte("shared-plaintext")) {
		t.Fatalf("the shared value at rest: %q, %v", ct, err)
	}
	if _, err := e.s.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	var kv int
	if err := db.QueryRow(`SELECT key_version FROM sealed_values WHERE name = 'ca'`).Scan(&kv); err != nil || kv != 2 {
		t.Fatalf("the shared value after rotation is under key %d (%v), want 2", kv, err)
	}
	if v, _, err := other.Shared(ctx, "ca", mk); err != nil || string(v.Reveal()) != "the-shared-plaintext" {
		t.Fatalf("Shared after rotation: %q %v", v.Reveal(), err)
	}
	// Copied onto another name: it does not open.
	exec(t, db, `INSERT INTO sealed_values (name, key_version, nonce, ciphertext, created_at) SELECT 'moved', key_version, nonce, ciphertext, created_at FROM sealed_values WHERE name = 'ca'`)
	if _, _, err := e.s.Shared(ctx, "moved", mk); !errors.Is(err, errdefs.ErrDataLoss) || strings.Contains(err.Error(), "shared-plaintext") {
		t.Fatalf("a value moved to another name: %v", err)
	}
}
