package capability

import (
	"context"
	"fmt"
	"sync"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// MemoryRevocationList is a RevocationList in memory: for tests, and the default of a
// verifier given none. It forgets everything when the process ends.
type MemoryRevocationList struct {
	mu  sync.RWMutex
	ids map[string]struct{}
}

var _ RevocationList = (*MemoryRevocationList)(nil)

// NewMemoryRevocationList returns an empty list.
func NewMemoryRevocationList() *MemoryRevocationList {
	return &MemoryRevocationList{ids: map[string]struct{}{}}
}

// Revoke adds id (32 lower-case hex digits, as in Claims.ID) to the list. Revoking a
// token revokes every token attenuated from it: they keep its ID.
func (m *MemoryRevocationList) Revoke(id string) error {
	if !isTokenID(id) {
		return fmt.Errorf("revoke capability %q: a token ID is 32 lower-case hex digits: %w", id, errdefs.ErrInvalidArgument)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ids[id] = struct{}{}
	return nil
}

// Revoked says whether id was revoked.
func (m *MemoryRevocationList) Revoked(_ context.Context, id string) (bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	_, ok := m.ids[id]
	return ok, nil
}

func isTokenID(id string) bool {
	if len(id) != 2*idSize {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
