package broker

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/paddockhq/paddock/internal/store/pgtest"
)

// TestMain stops the PostgreSQL server the tests started, if any.
func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Stop()
	os.Exit(code)
}

// eachStore runs f on a fresh store target of each backend: a SQLite file and a
// PostgreSQL database (skipped, saying so, only when PostgreSQL is not installed).
func eachStore(t *testing.T, f func(t *testing.T, target string)) {
	t.Run("sqlite", func(t *testing.T) { f(t, filepath.Join(t.TempDir(), "p.db")) })
	t.Run("postgres", func(t *testing.T) { f(t, pgtest.URL(t)) })
}
