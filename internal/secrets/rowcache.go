package secrets

import (
	"sync"
	"time"

	"github.com/paddockhq/paddock/internal/store"
)

// rowCacheTTL is how long Get trusts a secret's row (its ciphertext, never the value)
// without reading it again. Writes through this Secrets (Put, Delete, re-encryption,
// RotateKey) drop the row at once; the TTL bounds how long a write by another process
// (`paddock secrets rotate-key` on a running server's database) goes unseen, and what it
// can leave unseen is only a ciphertext under a key version the server also still holds.
// Why a cache at all: reading the row was a sixth of the control plane's CPU under the
// secrets broker's load benchmark (docs/benchmarks.md, table 8).
const rowCacheTTL = time.Second

// rowCache holds sealed rows by user and name. gen counts invalidations, so that a row
// read before a write committed is not cached after the write dropped it.
type rowCache struct {
	mu   sync.Mutex
	rows map[rowKey]cachedRow
	gen  uint64
}

type rowKey struct{ user, name string }

type cachedRow struct {
	row store.SecretRow
	at  time.Time
}

// maxCachedRows bounds the cache; past it, it starts again empty.
const maxCachedRows = 4096

// get returns the cached row, or the generation to hand put with a row read now.
func (c *rowCache) get(user, name string, now time.Time) (row store.SecretRow, gen uint64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.rows[rowKey{user, name}]
	if !ok || now.Sub(e.at) >= rowCacheTTL || now.Before(e.at) {
		return store.SecretRow{}, c.gen, false
	}
	return e.row, c.gen, true
}

// put caches row, read at generation gen, unless something was invalidated since.
func (c *rowCache) put(row store.SecretRow, gen uint64, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if c.rows == nil || len(c.rows) >= maxCachedRows {
		c.rows = map[rowKey]cachedRow{}
	}
	c.rows[rowKey{row.UserID, row.Name}] = cachedRow{row: row, at: now}
}

func (c *rowCache) drop(user, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	delete(c.rows, rowKey{user, name})
}

func (c *rowCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.rows = nil
}
