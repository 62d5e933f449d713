package wsbackup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/agent/history"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// A store that lists a blob it does not hold, one another sandbox's backup put in the
// bucket, cannot make its backup name that blob: a blob the sandbox's own last backup did
// not name is read from its store and hashed even when the bucket has it, and a file that
// is not the blob is refused by name. The blob a sandbox's own backups named is skipped.
func TestBackupNeverTrustsAListedHash(t *testing.T) {
	tg := startS3(t)
	ctx := context.Background()
	key := newKey(t)
	const secret = "alice's secret, whose hash bob has learnt\n"
	sum := sha256.Sum256([]byte(secret))
	hexSum := hex.EncodeToString(sum[:])

	checkpointed := func(files map[string]string) string {
		ws, hist := t.TempDir(), filepath.Join(t.TempDir(), "history")
		for name, content := range files {
			write(t, ws, name, content)
		}
		h, err := history.Open(ws, hist)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := h.Checkpoint("manual", "one"); err != nil {
			t.Fatal(err)
		}
		h.Close()
		return hist
	}
	alice := checkpointed(map[string]string{"secret.txt": secret})
	if _, err := Run(ctx, tg, key, "sb-alice", alice); err != nil {
		t.Fatal(err)
	}
	// Alice's next backup does not read the blob again: her own backup named it.
	b, err := Run(ctx, tg, key, "sb-alice", alice)
	if err != nil || b.Uploaded != 0 {
		t.Fatalf("alice's second backup: %+v, %v", b, err)
	}

	bob := checkpointed(map[string]string{"mine.txt": "bob's\n"})
	fake := filepath.Join(bob, "objects", hexSum[:2], hexSum[2:])
	if err := os.MkdirAll(filepath.Dir(fake), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fake, []byte(strings.Repeat("x", len(secret))), 0o400); err != nil {
		t.Fatal(err)
	}
	_, err = Run(ctx, tg, key, "sb-bob", bob)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), hexSum) {
		t.Fatalf("bob's backup listing alice's blob's hash: %v, want it refused naming %s", err, hexSum)
	}
	if all, _ := List(ctx, tg, "sb-bob"); len(all) != 0 {
		t.Fatalf("bob's refused backup left manifests %v", all)
	}
	// Bob's store holding the same content is his to back up, and a restore gives it.
	if err := os.Chmod(fake, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fake, []byte(secret), 0o400); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(ctx, tg, key, "sb-bob", bob); err != nil {
		t.Fatalf("bob's backup of a blob he holds: %v", err)
	}
	into := filepath.Join(t.TempDir(), "history")
	if _, err := Restore(ctx, tg, key, "sb-bob", time.Time{}, into); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(into, "objects", hexSum[:2], hexSum[2:])); err != nil || string(got) != secret {
		t.Fatalf("bob's restored blob: %q, %v", got, err)
	}
}

// A listing out of bounds, or naming what is not a blob, is refused naming it.
func TestCheckListing(t *testing.T) {
	ok := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name  string
		index int
		blobs []Blob
		want  error
		says  string
	}{
		{"fine", 10, []Blob{{ok, 3}}, nil, ""},
		{"index too big", MaxIndex + 1, nil, errdefs.ErrFailedPrecondition, "index"},
		{"not a hash", 10, []Blob{{"../../etc/passwd", 3}}, errdefs.ErrFailedPrecondition, "etc/passwd"},
		{"upper case", 10, []Blob{{strings.ToUpper(ok), 3}}, errdefs.ErrFailedPrecondition, "not a blob"},
		{"twice", 10, []Blob{{ok, 3}, {ok, 3}}, errdefs.ErrFailedPrecondition, "twice"},
		{"too big", 10, []Blob{{ok, MaxBlob + 1}}, errdefs.ErrFailedPrecondition, "over the bound"},
		{"negative", 10, []Blob{{ok, -1}}, errdefs.ErrFailedPrecondition, ok},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkListing(make([]byte, tc.index), tc.blobs)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("%v, want %v saying %q", err, tc.want, tc.says)
			}
		})
	}
}
