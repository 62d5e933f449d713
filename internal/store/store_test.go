package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store/pgtest"
)

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func hash(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }

func mustUser(t *testing.T, s *Store, name string, codes ...string) User {
	t.Helper()
	var hs [][]byte
	for _, c := range codes {
		hs = append(hs, hash(c))
	}
	var u User
	err := s.Update(context.Background(), func(tx *Tx) error {
		var err error
		u, err = tx.CreateUser(context.Background(), User{Username: name, PasswordHash: "$argon2id$x", Role: RoleUser, CreatedAt: t0}, hs)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestOpenCreatesPrivateFileAndConfiguresSQLite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	path := filepath.Join(dir, "paddock.db")
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for p, want := range map[string]os.FileMode{dir: 0o700 | os.ModeDir, path: 0o600} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode(), want)
		}
	}
	pragmas := map[string]string{"journal_mode": "wal", "foreign_keys": "1", "busy_timeout": "10000", "synchronous": "2"}
	for p, want := range pragmas {
		for _, db := range []struct {
			name string
			get  func(q string) (string, error)
		}{
			{"writer", func(q string) (string, error) { var v string; err := s.w.QueryRow(q).Scan(&v); return v, err }},
			{"reader", func(q string) (string, error) { var v string; err := s.r.QueryRow(q).Scan(&v); return v, err }},
		} {
			got, err := db.get("PRAGMA " + p)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("%s: PRAGMA %s = %s, want %s", db.name, p, got, want)
			}
		}
	}
	if _, err := s.r.Exec(`INSERT INTO login_attempts (key, at) VALUES ('x', 1)`); err == nil {
		t.Error("the read pool accepted a write; it must be query-only")
	}
	if s.w.Stats().MaxOpenConnections != 1 {
		t.Errorf("writer MaxOpenConnections = %d, want 1", s.w.Stats().MaxOpenConnections)
	}
}

func TestOpenRejectsBadPath(t *testing.T) {
	for _, p := range []string{"", "/tmp/x?mode=memory", "/tmp/a#b"} {
		if _, err := Open(context.Background(), p); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Open(%q) = %v, want ErrInvalidArgument", p, err)
		}
	}
}

func TestMigrationsIdempotent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		path := db.target(t)
		ctx := context.Background()
		for i := range 3 {
			s, err := Open(ctx, path)
			if err != nil {
				t.Fatalf("open #%d: %v", i, err)
			}
			v, err := s.AppliedVersion(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if v != SchemaVersion() || v < 1 {
				t.Errorf("open #%d: applied version %d, want %d", i, v, SchemaVersion())
			}
			var rows int
			if err := s.r.QueryRow(`SELECT count(*) FROM schema_migrations`).Scan(&rows); err != nil {
				t.Fatal(err)
			}
			if rows != SchemaVersion() {
				t.Errorf("open #%d: %d schema_migrations rows, want %d", i, rows, SchemaVersion())
			}
			if i == 0 {
				mustUser(t, s, "alice")
			}
			if n, _ := s.CountUsers(ctx); n != 1 {
				t.Errorf("open #%d: %d users, want the 1 created before (data lost by a re-migration?)", i, n)
			}
			s.Close()
		}
	})
}

func TestNewerSchemaRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		path := db.target(t)
		ctx := context.Background()
		s, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.w.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'future', 0)`, SchemaVersion()+1); err != nil {
			t.Fatal(err)
		}
		s.Close()
		_, err = Open(ctx, path)
		if !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Fatalf("Open of a newer schema = %v, want ErrFailedPrecondition", err)
		}
		if want := fmt.Sprintf("schema version %d", SchemaVersion()+1); !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Errorf("error %q does not say %q", err, want)
		}
	})
}

func TestMigrationFilesWellFormed(t *testing.T) {
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 {
		t.Fatal("no embedded migrations")
	}
}

func TestUsernamesUniqueIgnoringCase(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		s := db.open(t)
		mustUser(t, s, "Alice")
		for _, tc := range []struct {
			name    string
			wantErr error
		}{
			{"alice", errdefs.ErrAlreadyExists},
			{"ALICE", errdefs.ErrAlreadyExists},
			{"aLiCe", errdefs.ErrAlreadyExists},
			{"alice2", nil},
			{"bob", nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				err := s.Update(context.Background(), func(tx *Tx) error {
					_, err := tx.CreateUser(context.Background(), User{Username: tc.name, PasswordHash: "h", Role: RoleUser, CreatedAt: t0}, nil)
					return err
				})
				if !errors.Is(err, tc.wantErr) && !(tc.wantErr == nil && err == nil) {
					t.Errorf("create %q = %v, want %v", tc.name, err, tc.wantErr)
				}
			})
		}
		u, err := s.UserByUsername(context.Background(), "ALICE")
		if err != nil || u.Username != "Alice" {
			t.Errorf("UserByUsername(ALICE) = %+v, %v; want Alice", u, err)
		}
		if _, err := s.UserByUsername(context.Background(), "carol"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("unknown user: %v, want ErrNotFound", err)
		}
	})
}

func TestUserConstraints(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		s := db.open(t)
		for _, tc := range []struct {
			name string
			u    User
			want error
		}{
			{"bad role", User{Username: "x", PasswordHash: "h", Role: "root"}, errdefs.ErrInvalidArgument},
			{"duplicate id", User{ID: "fixed", Username: "y", PasswordHash: "h", Role: RoleUser}, errdefs.ErrAlreadyExists},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if tc.u.ID != "" {
					_ = s.Update(context.Background(), func(tx *Tx) error {
						_, err := tx.CreateUser(context.Background(), User{ID: tc.u.ID, Username: "first", PasswordHash: "h", Role: RoleUser}, nil)
						return err
					})
				}
				err := s.Update(context.Background(), func(tx *Tx) error { _, err := tx.CreateUser(context.Background(), tc.u, nil); return err })
				if !errors.Is(err, tc.want) {
					t.Errorf("got %v, want %v", err, tc.want)
				}
			})
		}
	})
}

func TestUpdateRollsBackOnError(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		s := db.open(t)
		boom := errors.New("boom")
		err := s.Update(context.Background(), func(tx *Tx) error {
			if _, err := tx.CreateUser(context.Background(), User{Username: "ghost", PasswordHash: "h", Role: RoleUser}, [][]byte{hash("c")}); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("Update = %v, want boom", err)
		}
		if _, err := s.UserByUsername(context.Background(), "ghost"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("user from a rolled-back transaction is visible: %v", err)
		}
	})
}

func TestRecoveryCodesSingleUse(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		s := db.open(t)
		ctx := context.Background()
		alice := mustUser(t, s, "alice", "code-1", "code-2")
		bob := mustUser(t, s, "bob", "code-b")
		redeem := func(userID, code string) error {
			return s.Update(ctx, func(tx *Tx) error { return tx.RedeemRecoveryCode(ctx, userID, hash(code), t0) })
		}
		for _, tc := range []struct {
			name, user, code string
			want             error
		}{
			{"first use", alice.ID, "code-1", nil},
			{"reuse", alice.ID, "code-1", errdefs.ErrNotFound},
			{"other user's code", alice.ID, "code-b", errdefs.ErrNotFound},
			{"unknown code", alice.ID, "nope", errdefs.ErrNotFound},
			{"second code", alice.ID, "code-2", nil},
			{"bob's own", bob.ID, "code-b", nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if err := redeem(tc.user, tc.code); !errors.Is(err, tc.want) && !(err == nil && tc.want == nil) {
					t.Errorf("redeem = %v, want %v", err, tc.want)
				}
			})
		}
		if n, _ := s.UnusedRecoveryCodes(ctx, alice.ID); n != 0 {
			t.Errorf("alice has %d unused codes, want 0", n)
		}
		if err := s.Update(ctx, func(tx *Tx) error { return tx.ReplaceRecoveryCodes(ctx, alice.ID, [][]byte{hash("new")}) }); err != nil {
			t.Fatal(err)
		}
		if n, _ := s.UnusedRecoveryCodes(ctx, alice.ID); n != 1 {
			t.Errorf("after replace: %d unused codes, want 1", n)
		}
	})
}

func TestConcurrentRedeemOneWinner(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		s := db.open(t)
		ctx := context.Background()
		u := mustUser(t, s, "alice", "only")
		var wg sync.WaitGroup
		results := make(chan error, 16)
		for range 16 {
			wg.Go(func() {
				results <- s.Update(ctx, func(tx *Tx) error { return tx.RedeemRecoveryCode(ctx, u.ID, hash("only"), t0) })
			})
		}
		wg.Wait()
		close(results)
		wins := 0
		for err := range results {
			if err == nil {
				wins++
			} else if !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("unexpected error: %v", err)
			}
		}
		if wins != 1 {
			t.Errorf("%d redemptions of one code succeeded, want exactly 1", wins)
		}
	})
}

func TestSessions(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		s := db.open(t)
		ctx := context.Background()
		u := mustUser(t, s, "alice")
		mk := func(id string, created, expires, seen time.Time) {
			t.Helper()
			err := s.Update(ctx, func(tx *Tx) error {
				return tx.CreateSession(ctx, Session{IDHash: hash(id), UserID: u.ID, CreatedAt: created, ExpiresAt: expires, LastSeenAt: seen, UserAgent: "ua", IP: "127.0.0.1"})
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		now := t0.Add(48 * time.Hour)
		mk("live", now.Add(-time.Hour), now.Add(time.Hour), now.Add(-time.Minute))
		mk("absolute-expired", t0, now.Add(-time.Second), now.Add(-time.Minute))
		mk("idle-expired", now.Add(-3*time.Hour), now.Add(time.Hour), now.Add(-2*time.Hour))

		ss, su, err := s.SessionByHash(ctx, hash("live"))
		if err != nil {
			t.Fatal(err)
		}
		if su.ID != u.ID || ss.UserAgent != "ua" || ss.IP != "127.0.0.1" || !ss.ExpiresAt.Equal(now.Add(time.Hour)) {
			t.Errorf("SessionByHash = %+v, %+v", ss, su)
		}
		if _, _, err := s.SessionByHash(ctx, hash("unknown")); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("unknown session: %v", err)
		}
		err = s.Update(ctx, func(tx *Tx) error {
			return tx.CreateSession(ctx, Session{IDHash: hash("orphan"), UserID: "nobody", CreatedAt: now, ExpiresAt: now, LastSeenAt: now})
		})
		if !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("session for a missing user: %v, want ErrNotFound (foreign key)", err)
		}

		n, err := s.DeleteExpiredSessions(ctx, now, now.Add(-time.Hour))
		if err != nil || n != 2 {
			t.Errorf("DeleteExpiredSessions = %d, %v; want 2", n, err)
		}
		for id, want := range map[string]error{"live": nil, "absolute-expired": errdefs.ErrNotFound, "idle-expired": errdefs.ErrNotFound} {
			if _, _, err := s.SessionByHash(ctx, hash(id)); !errors.Is(err, want) && !(err == nil && want == nil) {
				t.Errorf("after cleanup, %s: %v, want %v", id, err, want)
			}
		}

		// Touch is throttled: within the granularity it does not write.
		if err := s.TouchSession(ctx, hash("live"), now, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := s.TouchSession(ctx, hash("live"), now.Add(time.Second), time.Minute); err != nil {
			t.Fatal(err)
		}
		ss, _, _ = s.SessionByHash(ctx, hash("live"))
		if !ss.LastSeenAt.Equal(now) {
			t.Errorf("LastSeenAt = %v, want %v", ss.LastSeenAt, now)
		}

		mk("second", now, now.Add(time.Hour), now)
		if err := s.Update(ctx, func(tx *Tx) error { return tx.DeleteSession(ctx, hash("live")) }); err != nil {
			t.Fatal(err)
		}
		if err := s.Update(ctx, func(tx *Tx) error { return tx.DeleteSession(ctx, hash("live")) }); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("deleting twice: %v", err)
		}
		var deleted int
		_ = s.Update(ctx, func(tx *Tx) error { var err error; deleted, err = tx.DeleteUserSessions(ctx, u.ID); return err })
		if c, _ := s.CountUserSessions(ctx, u.ID); deleted != 1 || c != 0 {
			t.Errorf("DeleteUserSessions deleted %d, %d left; want 1, 0", deleted, c)
		}
	})
}

func TestAPITokens(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		s := db.open(t)
		ctx := context.Background()
		alice, bob := mustUser(t, s, "alice"), mustUser(t, s, "bob")
		var tok APIToken
		err := s.Update(ctx, func(tx *Tx) error {
			var err error
			tok, err = tx.CreateAPIToken(ctx, APIToken{UserID: alice.ID, Name: "laptop", TokenHash: hash("pdk_a"), Prefix: "pdk_a", CreatedAt: t0})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		err = s.Update(ctx, func(tx *Tx) error {
			_, err := tx.CreateAPIToken(ctx, APIToken{UserID: bob.ID, Name: "dup", TokenHash: hash("pdk_a"), Prefix: "pdk_a", CreatedAt: t0})
			return err
		})
		if !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Errorf("duplicate token hash: %v", err)
		}
		got, owner, err := s.APITokenByHash(ctx, hash("pdk_a"))
		if err != nil || got.ID != tok.ID || owner.ID != alice.ID || !got.LastUsedAt.IsZero() || !got.RevokedAt.IsZero() {
			t.Fatalf("APITokenByHash = %+v, %+v, %v", got, owner, err)
		}
		if err := s.TouchAPIToken(ctx, tok.ID, t0.Add(time.Hour), time.Minute); err != nil {
			t.Fatal(err)
		}
		got, _, _ = s.APITokenByHash(ctx, hash("pdk_a"))
		if !got.LastUsedAt.Equal(t0.Add(time.Hour)) {
			t.Errorf("LastUsedAt = %v", got.LastUsedAt)
		}
		revoke := func(userID string) error {
			return s.Update(ctx, func(tx *Tx) error { return tx.RevokeAPIToken(ctx, userID, tok.ID, t0.Add(2*time.Hour)) })
		}
		if err := revoke(bob.ID); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("bob revoking alice's token: %v, want ErrNotFound", err)
		}
		if err := revoke(alice.ID); err != nil {
			t.Fatal(err)
		}
		if err := revoke(alice.ID); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("revoking twice: %v", err)
		}
		list, err := s.ListAPITokens(ctx, alice.ID)
		if err != nil || len(list) != 1 || list[0].RevokedAt.IsZero() {
			t.Errorf("ListAPITokens = %+v, %v", list, err)
		}
		if list, _ := s.ListAPITokens(ctx, bob.ID); len(list) != 0 {
			t.Errorf("bob sees %d tokens", len(list))
		}
	})
}

func TestLoginAttempts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		s := db.open(t)
		ctx := context.Background()
		for i := range 5 {
			if err := s.Update(ctx, func(tx *Tx) error {
				_, err := tx.RecordLoginAttempt(ctx, "user:alice", t0.Add(time.Duration(i)*time.Minute))
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		n, oldest, err := s.LoginAttempts(ctx, "user:alice", t0.Add(90*time.Second))
		if err != nil || n != 3 || !oldest.Equal(t0.Add(2*time.Minute)) {
			t.Errorf("LoginAttempts = %d, %v, %v; want 3 since t0+2m", n, oldest, err)
		}
		at, err := s.NthLatestLoginAttempt(ctx, "user:alice", t0.Add(-time.Hour), 2)
		if err != nil || !at.Equal(t0.Add(3*time.Minute)) {
			t.Errorf("NthLatest(2) = %v, %v", at, err)
		}
		if at, _ := s.NthLatestLoginAttempt(ctx, "user:alice", t0.Add(-time.Hour), 9); !at.IsZero() {
			t.Errorf("NthLatest(9) = %v, want zero", at)
		}
		if n, _, _ := s.LoginAttempts(ctx, "user:bob", time.Time{}); n != 0 {
			t.Errorf("bob has %d attempts", n)
		}
		if p, err := s.PruneLoginAttempts(ctx, t0.Add(time.Minute)); err != nil || p != 2 {
			t.Errorf("Prune = %d, %v; want 2", p, err)
		}
		var id int64
		_ = s.Update(ctx, func(tx *Tx) error { var err error; id, err = tx.RecordLoginAttempt(ctx, "user:bob", t0); return err })
		_ = s.Update(ctx, func(tx *Tx) error { return tx.DeleteLoginAttempt(ctx, id) })
		if n, _, _ := s.LoginAttempts(ctx, "user:bob", time.Time{}); n != 0 {
			t.Errorf("after DeleteLoginAttempt: %d attempts", n)
		}
		_ = s.Update(ctx, func(tx *Tx) error { return tx.ClearLoginAttempts(ctx, "user:alice") })
		if n, _, _ := s.LoginAttempts(ctx, "user:alice", time.Time{}); n != 0 {
			t.Errorf("after clear: %d attempts", n)
		}
	})
}

func TestAudit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		s := db.open(t)
		ctx := context.Background()
		events := []AuditEvent{
			{At: t0, ActorUserID: "u1", Action: "auth.login.success", Target: "u1", Detail: map[string]any{"ip": "127.0.0.1"}},
			{At: t0.Add(time.Second), Action: "auth.login.failure", Target: "alice"},
			{At: t0.Add(2 * time.Second), ActorUserID: "u1", Action: "auth.logout"},
		}
		for _, e := range events {
			if err := s.Update(ctx, func(tx *Tx) error { return tx.AppendAudit(ctx, e) }); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Update(ctx, func(tx *Tx) error { return tx.AppendAudit(ctx, AuditEvent{}) }); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("event without action: %v", err)
		}
		all, err := s.ListAudit(ctx, AuditFilter{})
		if err != nil || len(all) != 3 || all[0].Action != "auth.logout" {
			t.Fatalf("ListAudit = %+v, %v", all, err)
		}
		if all[2].Detail["ip"] != "127.0.0.1" || !all[2].At.Equal(t0) {
			t.Errorf("round trip: %+v", all[2])
		}
		mine, _ := s.ListAudit(ctx, AuditFilter{ActorUserID: "u1"})
		fails, _ := s.ListAudit(ctx, AuditFilter{Action: "auth.login.failure"})
		if len(mine) != 2 || len(fails) != 1 {
			t.Errorf("filters: %d by u1, %d failures", len(mine), len(fails))
		}
	})
}

// TestConcurrentWriters hammers the store from many goroutines and from a second
// Store on the same file (as a second process would): none may see SQLITE_BUSY.
func TestConcurrentWriters(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		path := db.target(t)
		ctx := context.Background()
		a, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		b, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		const workers, each = 8, 40
		var wg sync.WaitGroup
		errs := make(chan error, workers*each*2)
		for w := range workers {
			st := a
			if w%2 == 1 {
				st = b
			}
			wg.Go(func() {
				for i := range each {
					err := st.Update(ctx, func(tx *Tx) error {
						// Read then write inside one transaction: the pattern that fails
						// with SQLITE_BUSY under deferred transactions.
						if _, _, err := st.LoginAttempts(ctx, "k", time.Time{}); err != nil {
							return err
						}
						if _, err := tx.CreateUser(ctx, User{Username: fmt.Sprintf("u%d-%d", w, i), PasswordHash: "h", Role: RoleUser}, nil); err != nil {
							return err
						}
						_, err := tx.RecordLoginAttempt(ctx, "k", t0)
						return err
					})
					if err != nil {
						errs <- err
					}
					if _, err := st.CountUsers(ctx); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("concurrent write: %v", err)
		}
		if n, _ := a.CountUsers(ctx); n != workers*each {
			t.Errorf("%d users, want %d", n, workers*each)
		}
	})
}

func TestPing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		s := db.open(t)
		if err := s.Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
		s.Close()
		if err := s.Ping(context.Background()); !errors.Is(err, errdefs.ErrUnavailable) {
			t.Errorf("Ping after Close = %v, want ErrUnavailable", err)
		}
	})
}

// A PostgreSQL URL that does not parse is refused as bad input; one whose server is not
// there is unavailable; neither error repeats the password.
func TestOpenPostgresErrors(t *testing.T) {
	ctx := context.Background()
	for target, want := range map[string]error{
		"postgres://u:hunter2@db:notaport/x":                               errdefs.ErrInvalidArgument,
		"postgres://u:hunter2@/x?host=" + filepath.Join(t.TempDir(), "no"): errdefs.ErrUnavailable,
	} {
		_, err := Open(ctx, target)
		if !errors.Is(err, want) {
			t.Errorf("Open(%s) = %v, want %v", RedactURL(target), err, want)
		}
		if err != nil && bytes.Contains([]byte(err.Error()), []byte("hunter2")) {
			t.Errorf("Open(%s) = %v: repeats the password", RedactURL(target), err)
		}
	}
	if got := RedactURL("postgres://u:hunter2@db/x?password=hunter2"); bytes.Contains([]byte(got), []byte("hunter2")) {
		t.Errorf("RedactURL kept the password: %s", got)
	}
}

// The PostgreSQL store says what it is and where, without the password.
func TestPostgresPathHasNoPassword(t *testing.T) {
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), "hunter2") // trust auth ignores it
	s, err := Open(context.Background(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Backend() != "postgres" || bytes.Contains([]byte(s.Path()), []byte("hunter2")) || !IsPostgresURL(s.Path()) {
		t.Errorf("Backend %q, Path %q: want postgres and the URL without its password", s.Backend(), s.Path())
	}
}

// When PostgreSQL drops every connection (a restart, a failover, an admin's
// pg_terminate_backend), the store fails only as unavailable and recovers by itself: the
// next reads, the prepared session lookup and writes work on new connections.
func TestPostgresRecoversFromDroppedConnections(t *testing.T) {
	ctx := context.Background()
	target := pgtest.URL(t)
	s, err := Open(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	alice := mustUser(t, s, "alice")
	if err := s.Update(ctx, func(tx *Tx) error {
		return tx.CreateSession(ctx, Session{IDHash: hash("s1"), UserID: alice.ID, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), LastSeenAt: t0})
	}); err != nil {
		t.Fatal(err)
	}
	// Warm every pool's connections, then have the server end them all.
	for range 4 {
		if _, _, err := s.SessionByHash(ctx, hash("s1")); err != nil {
			t.Fatal(err)
		}
	}
	admin, err := sql.Open("pgx", target)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var n int
	if err := admin.QueryRow(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil || n == 0 {
		t.Fatalf("terminated %d connections: %v", n, err)
	}
	ok := func(what string, f func() error) {
		t.Helper()
		for range 10 { // each pool connection fails at most once
			err := f()
			if err == nil {
				return
			}
			if !errors.Is(err, errdefs.ErrUnavailable) {
				t.Fatalf("%s after the connections dropped: %v, want success or ErrUnavailable", what, err)
			}
		}
		t.Fatalf("%s never recovered", what)
	}
	ok("session lookup", func() error { _, _, err := s.SessionByHash(ctx, hash("s1")); return err })
	ok("count", func() error { _, err := s.CountUsers(ctx); return err })
	ok("write", func() error {
		return s.Update(ctx, func(tx *Tx) error { _, err := tx.RecordLoginAttempt(ctx, "k", t0); return err })
	})
	ok("audit", func() error { return s.Audit(ctx, AuditEvent{At: t0, Action: "test.after"}) })
}

// A write whose connection PostgreSQL dropped while it was idle is tried once more on a
// new connection (nothing had been written): it succeeds at the first call. A write
// whose server is gone fails as unavailable, naming the database.
func TestPostgresWriteRetriedOnNewConnection(t *testing.T) {
	ctx := context.Background()
	own := pgtest.StartOwn(t)
	s, err := Open(ctx, own.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	write := func() error {
		return s.Update(ctx, func(tx *Tx) error { _, err := tx.RecordLoginAttempt(ctx, "k", t0); return err })
	}
	if err := write(); err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("pgx", own.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for range 3 {
		var n int
		if err := admin.QueryRow(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil || n == 0 {
			t.Fatalf("terminated %d connections: %v", n, err)
		}
		if err := write(); err != nil {
			t.Fatalf("write after the connection dropped: %v, want it tried again on a new one", err)
		}
	}
	if err := own.Stop("immediate"); err != nil {
		t.Fatal(err)
	}
	err = write()
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "the database is unavailable") {
		t.Errorf("write with the server stopped: %v, want unavailable naming the database", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "database") {
		t.Errorf("Ping with the server stopped: %v, want unavailable naming the database", err)
	}
	if err := own.Start(); err != nil {
		t.Fatal(err)
	}
	if err := write(); err != nil {
		t.Errorf("write after the server is back: %v", err)
	}
}
