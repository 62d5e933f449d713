package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// A capability's record: unknown means refused, recorded means usable, revoked (by its
// own sandbox only) means refused, and the records go with their sandbox.
func TestCapabilities(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		s := db.open(t)
		alice := mustUser(t, s, "alice")
		mustSandbox(t, s, alice.ID, "sb-a1", "one")
		mustSandbox(t, s, alice.ID, "sb-a2", "two")
		id := "0123456789abcdef0123456789abcdef"
		revoked := func() bool {
			t.Helper()
			r, err := s.CapabilityRevoked(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		if !revoked() {
			t.Error("a token this database never recorded is usable")
		}
		c := Capability{ID: id, SandboxID: "sb-a1", MintedBy: alice.ID, Resource: "file:/workspace/src", Actions: []string{"read", "write"},
			ExpiresAt: time.Unix(100, 0), CreatedAt: time.Unix(10, 0)}
		if err := s.Update(ctx, func(tx *Tx) error { return tx.CreateCapability(ctx, c) }); err != nil {
			t.Fatal(err)
		}
		if revoked() {
			t.Error("a recorded token is refused")
		}
		list, err := s.ListCapabilities(ctx, "sb-a1")
		if err != nil || len(list) != 1 || list[0].Resource != c.Resource || len(list[0].Actions) != 2 || !list[0].ExpiresAt.Equal(c.ExpiresAt) || !list[0].RevokedAt.IsZero() {
			t.Fatalf("ListCapabilities = %+v, %v", list, err)
		}
		revoke := func(sb string, at int64) (Capability, error) {
			var got Capability
			err := s.Update(ctx, func(tx *Tx) (err error) {
				got, err = tx.RevokeCapability(ctx, sb, id, time.Unix(at, 0))
				return err
			})
			return got, err
		}
		if _, err := revoke("sb-a2", 20); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("revoked through another sandbox: %v, want ErrNotFound", err)
		}
		if revoked() {
			t.Error("another sandbox's revocation took effect")
		}
		if got, err := revoke("sb-a1", 20); err != nil || !got.RevokedAt.Equal(time.Unix(20, 0)) {
			t.Fatalf("revoke = %+v, %v", got, err)
		}
		if got, err := revoke("sb-a1", 30); err != nil || !got.RevokedAt.Equal(time.Unix(20, 0)) {
			t.Errorf("second revoke = %+v, %v: want the first time kept", got, err)
		}
		if !revoked() {
			t.Error("a revoked token is usable")
		}
		if err := s.Update(ctx, func(tx *Tx) error { return tx.DeleteSandbox(ctx, "sb-a1") }); err != nil {
			t.Fatal(err)
		}
		if list, err := s.ListCapabilities(ctx, "sb-a1"); err != nil || len(list) != 0 {
			t.Errorf("after the sandbox was deleted: %+v, %v", list, err)
		}
	})
}
