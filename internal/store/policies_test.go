package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// A sandbox's policy: absent, attached, replaced, detached, and gone with its sandbox.
func TestSandboxPolicy(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		s := db.open(t)
		alice := mustUser(t, s, "alice")
		mustSandbox(t, s, alice.ID, "sb-a1", "one")
		if _, err := s.SandboxPolicy(ctx, "sb-a1"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("no policy yet: %v", err)
		}
		put := func(id, text string) error {
			return s.Update(ctx, func(tx *Tx) error {
				return tx.PutSandboxPolicy(ctx, SandboxPolicy{SandboxID: id, Text: text, UpdatedBy: alice.ID, UpdatedAt: time.Unix(5, 0)})
			})
		}
		if err := put("sb-a1", "shell: {deny: [x]}\n"); err != nil {
			t.Fatal(err)
		}
		if err := put("sb-a1", "files: {jail: /workspace}\n"); err != nil {
			t.Fatal(err)
		}
		got, err := s.SandboxPolicy(ctx, "sb-a1")
		if err != nil || got.Text != "files: {jail: /workspace}\n" || got.UpdatedBy != alice.ID || !got.UpdatedAt.Equal(time.Unix(5, 0)) {
			t.Fatalf("SandboxPolicy = %+v, %v", got, err)
		}
		if err := put("sb-nope", "x"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("policy of a missing sandbox: %v, want ErrNotFound", err)
		}
		del := func(id string) error {
			return s.Update(ctx, func(tx *Tx) error { return tx.DeleteSandboxPolicy(ctx, id) })
		}
		if err := del("sb-a1"); err != nil {
			t.Fatal(err)
		}
		if err := del("sb-a1"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("second detach: %v, want ErrNotFound", err)
		}
		if err := put("sb-a1", "x"); err != nil {
			t.Fatal(err)
		}
		if err := s.Update(ctx, func(tx *Tx) error { return tx.DeleteSandbox(ctx, "sb-a1") }); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := s.r.QueryRow(`SELECT count(*) FROM sandbox_policies`).Scan(&n); err != nil || n != 0 {
			t.Errorf("after the sandbox was deleted: %d policies, %v", n, err)
		}
	})
}
