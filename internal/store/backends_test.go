package store

import (
	"context"
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

// testDB is one backend the conformance suite runs on.
type testDB struct {
	name string
	// target returns a fresh, empty database's target for Open.
	target func(t *testing.T) string
}

// open opens a fresh database, closed when t ends.
func (d testDB) open(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), d.target(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var testDBs = []testDB{
	{"sqlite", func(t *testing.T) string { return filepath.Join(t.TempDir(), "db", "paddock.db") }},
	// Skips only when PostgreSQL is not installed, saying so.
	{"postgres", func(t *testing.T) string { return pgtest.URL(t) }},
}

// forEachBackend runs f as a subtest on each backend: SQLite and PostgreSQL.
func forEachBackend(t *testing.T, f func(t *testing.T, db testDB)) {
	t.Helper()
	for _, d := range testDBs {
		t.Run(d.name, func(t *testing.T) { f(t, d) })
	}
}
