package secrets

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store"
)

// env is a data dir with a database and a key file, as `paddock serve` has.
type env struct {
	dir  string
	st   *store.Store
	keys KeySource
	s    *Secrets
	// users by name → ID
	users map[string]string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{dir: t.TempDir(), users: map[string]string{}}
	e.keys = KeySource{File: filepath.Join(e.dir, KeyFileName)}
	e.reopenStore(t)
	e.s = e.mustOpen(t)
	for _, name := range []string{"alice", "bob"} {
		e.users[name] = e.addUser(t, name)
	}
	return e
}

func (e *env) reopenStore(t *testing.T) {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(e.dir, "paddock.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e.st = st
}

func (e *env) mustOpen(t *testing.T) *Secrets {
	t.Helper()
	s, err := Open(context.Background(), e.st, e.keys, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func (e *env) addUser(t *testing.T, name string) string {
	t.Helper()
	var u store.User
	err := e.st.Update(context.Background(), func(tx *store.Tx) error {
		var err error
		u, err = tx.CreateUser(context.Background(), store.User{Username: name, PasswordHash: "$argon2id$x", Role: store.RoleUser, CreatedAt: time.Now()}, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return u.ID
}

func (e *env) put(t *testing.T, user, name, value string) Info {
	t.Helper()
	info, err := e.s.Put(context.Background(), e.users[user], name, []byte(value))
	if err != nil {
		t.Fatalf("Put(%s, %s): %v", user, name, err)
	}
	return info
}

func (e *env) get(user, name string) (string, error) {
	v, _, err := e.s.Get(context.Background(), e.users[user], name)
	return string(v.Reveal()), err
}

// sql opens the database file directly, as someone with the file (and no key) could.
func (e *env) sql(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(e.dir, "paddock.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func exec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func TestRoundTrip(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	first := e.put(t, "alice", "github-token", "ghp_one")
	if first.Name != "github-token" || first.Version != 1 || first.CreatedAt.IsZero() || !first.CreatedAt.Equal(first.UpdatedAt) {
		t.Fatalf("first put: %+v", first)
	}
	second := e.put(t, "alice", "github-token", "ghp_two")
	if second.Version != 2 || !second.CreatedAt.Equal(first.CreatedAt) || second.UpdatedAt.Before(first.UpdatedAt) {
		t.Fatalf("second put: %+v after %+v", second, first)
	}
	e.put(t, "alice", "a.b_c-d", "x")
	if got, err := e.get("alice", "github-token"); err != nil || got != "ghp_two" {
		t.Fatalf("Get: %q, %v", got, err)
	}
	list, err := e.s.List(ctx, e.users["alice"])
	if err != nil || len(list) != 2 || list[0].Name != "a.b_c-d" || list[1].Name != "github-token" || list[1].Version != 2 {
		t.Fatalf("List: %+v, %v", list, err)
	}
	// Another user sees nothing of alice's, and cannot delete it.
	if list, err := e.s.List(ctx, e.users["bob"]); err != nil || len(list) != 0 {
		t.Fatalf("bob's list: %+v, %v", list, err)
	}
	if _, err := e.get("bob", "github-token"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("bob's Get of alice's name: %v, want not found", err)
	}
	if err := e.s.Delete(ctx, e.users["bob"], "github-token"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("bob's Delete of alice's name: %v, want not found", err)
	}
	if err := e.s.Delete(ctx, e.users["alice"], "github-token"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.get("alice", "github-token"); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), `secret "github-token"`) {
		t.Fatalf("Get after Delete: %v", err)
	}
	if err := e.s.Delete(ctx, e.users["alice"], "github-token"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("second Delete: %v", err)
	}
	// The values survive a restart with the same key file.
	e.s = e.mustOpen(t)
	if got, err := e.get("alice", "a.b_c-d"); err != nil || got != "x" {
		t.Fatalf("Get after reopen: %q, %v", got, err)
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t)
	alice := e.users["alice"]
	tests := []struct {
		name, secret string
		value        []byte
		want         error
		msg          string
	}{
		{"empty name", "", []byte("v"), errdefs.ErrInvalidArgument, "want 1 to 64 characters of a-z"},
		{"upper case", "GitHub", []byte("v"), errdefs.ErrInvalidArgument, `secret name "GitHub"`},
		{"slash", "a/b", []byte("v"), errdefs.ErrInvalidArgument, "a-z, 0-9"},
		{"leading dot", ".env", []byte("v"), errdefs.ErrInvalidArgument, "starting with a letter or digit"},
		{"dot dot", "..", []byte("v"), errdefs.ErrInvalidArgument, "starting with a letter or digit"},
		{"space", "a b", []byte("v"), errdefs.ErrInvalidArgument, "a-z"},
		{"too long", strings.Repeat("a", 65), []byte("v"), errdefs.ErrInvalidArgument, "1 to 64"},
		{"non-ASCII", "clé", []byte("v"), errdefs.ErrInvalidArgument, "a-z"},
		{"empty value", "a", nil, errdefs.ErrInvalidArgument, "the value is empty"},
		{"value over the limit", "a", make([]byte, MaxValueSize+1), errdefs.ErrInvalidArgument, "over the limit of 65536 (64 KiB)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.s.Put(context.Background(), alice, tt.secret, tt.value)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Put: %v; want %v containing %q", err, tt.want, tt.msg)
			}
		})
	}
	for _, ok := range []string{"a", "0", strings.Repeat("z", 64), "openai.api-key_2"} {
		if _, err := e.s.Put(context.Background(), alice, ok, make([]byte, MaxValueSize)); err != nil {
			t.Errorf("Put(%q, 64 KiB): %v", ok, err)
		}
	}
}

func TestPerUserLimit(t *testing.T) {
	e := newEnv(t)
	for i := range MaxPerUser {
		e.put(t, "alice", fmt.Sprintf("s%d", i), "v")
	}
	_, err := e.s.Put(context.Background(), e.users["alice"], "one-more", []byte("v"))
	if !errors.Is(err, errdefs.ErrLimitExceeded) || !strings.Contains(err.Error(), "100 secrets") {
		t.Fatalf("Put past the limit: %v", err)
	}
	e.put(t, "alice", "s0", "a new version is not a new secret")
	e.put(t, "bob", "s0", "the limit is per user")
}

// A ciphertext moved to another row does not decrypt: not to another user, not to another
// name, not over a newer version.
func TestAssociatedDataBindsRow(t *testing.T) {
	e := newEnv(t)
	e.put(t, "alice", "token", "alice's value")
	e.put(t, "alice", "other", "placeholder")
	e.put(t, "bob", "token", "bob's value")
	db := e.sql(t)
	var nonce1, ct1 []byte
	if err := db.QueryRow(`SELECT nonce, ciphertext FROM secrets WHERE user_id = ? AND name = 'token'`, e.users["alice"]).Scan(&nonce1, &ct1); err != nil {
		t.Fatal(err)
	}
	e.put(t, "alice", "token", "alice's second value")
	copyTo := func(user, name string, version int64) {
		exec(t, db, `UPDATE secrets SET nonce = ?, ciphertext = ?, version = ? WHERE user_id = ? AND name = ?`, nonce1, ct1, version, e.users[user], name)
	}
	tests := []struct {
		name, user, secret string
		version            int64
	}{
		{"to another user", "bob", "token", 1},
		{"to another name", "alice", "other", 1},
		{"over a newer version", "alice", "token", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			copyTo(tt.user, tt.secret, tt.version)
			_, err := e.get(tt.user, tt.secret)
			if !errors.Is(err, errdefs.ErrDataLoss) || !strings.Contains(err.Error(), fmt.Sprintf("secret %q (version %d)", tt.secret, tt.version)) {
				t.Fatalf("Get: %v; want data loss naming the secret", err)
			}
			if strings.Contains(err.Error(), "value\"") || strings.Contains(err.Error(), "alice's") {
				t.Fatalf("the error shows a value: %v", err)
			}
		})
	}
	// The original row, version 1 of alice's token, would have decrypted: the failure is the move.
	copyTo("alice", "token", 1)
	if got, err := e.get("alice", "token"); err != nil || got != "alice's value" {
		t.Fatalf("the row put back where it was: %q, %v", got, err)
	}
}

func TestCorruptCiphertext(t *testing.T) {
	tests := []struct{ name, update string }{
		{"truncated", `UPDATE secrets SET ciphertext = substr(ciphertext, 1, length(ciphertext) - 1)`},
		{"shorter than the tag", `UPDATE secrets SET ciphertext = substr(ciphertext, 1, 5)`},
		{"empty", `UPDATE secrets SET ciphertext = x''`},
		{"flipped byte", `UPDATE secrets SET ciphertext = CAST(CASE WHEN substr(ciphertext, 1, 1) = x'00' THEN x'01' ELSE x'00' END || substr(ciphertext, 2) AS BLOB)`},
		{"truncated nonce", `UPDATE secrets SET nonce = substr(nonce, 1, 4)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.put(t, "alice", "api-key", "sk-live-value")
			exec(t, e.sql(t), tt.update)
			_, err := e.get("alice", "api-key")
			if !errors.Is(err, errdefs.ErrDataLoss) || !strings.Contains(err.Error(), `secret "api-key" (version 1)`) || strings.Contains(err.Error(), "sk-live") {
				t.Fatalf("Get: %v; want data loss naming the secret", err)
			}
			// A rotation refuses to go on past it, naming it and its owner.
			_, err = e.s.RotateKey(context.Background())
			if !errors.Is(err, errdefs.ErrDataLoss) || !strings.Contains(err.Error(), `secret "api-key"`) || !strings.Contains(err.Error(), e.users["alice"]) {
				t.Fatalf("RotateKey: %v", err)
			}
		})
	}
}

func TestFirstStartMakesKeyFile(t *testing.T) {
	e := newEnv(t)
	fi, err := os.Stat(e.keys.File)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	data, _ := os.ReadFile(e.keys.File)
	ring, err := parseKeyring(data)
	if err != nil || ring.primary != 1 || len(ring.keys) != 1 {
		t.Fatalf("key file: %v %+v", err, ring)
	}
	e.put(t, "alice", "a", "v")
	// The next start uses the file it made, not a new one.
	e.s = e.mustOpen(t)
	if after, _ := os.ReadFile(e.keys.File); !bytes.Equal(after, data) {
		t.Error("the key file changed on the second start")
	}
	if got, err := e.get("alice", "a"); err != nil || got != "v" {
		t.Fatalf("Get: %q, %v", got, err)
	}
}

// Open refuses a key that does not fit the database, says which and what to do, and
// changes nothing.
func TestOpenRefusesWrongKey(t *testing.T) {
	otherKey := base64.StdEncoding.EncodeToString(randomKey())
	tests := []struct {
		name  string
		setup func(t *testing.T, e *env) KeySource
		want  error
		msgs  []string
	}{
		{"another key file", func(t *testing.T, e *env) KeySource {
			writeFile(t, e.keys.File, freshKeyring(1).marshal())
			return e.keys
		}, errdefs.ErrFailedPrecondition, []string{"key version 1 in the key file " + "KEYFILE" + " is not the key the database", "from the backup taken with it"}},
		{"wrong environment key", func(t *testing.T, e *env) KeySource {
			os.Remove(e.keys.File)
			return KeySource{File: e.keys.File, Env: otherKey}
		}, errdefs.ErrFailedPrecondition, []string{"environment variable PADDOCK_SECRETS_KEY is not the key"}},
		{"key file lost", func(t *testing.T, e *env) KeySource {
			os.Remove(e.keys.File)
			return e.keys
		}, errdefs.ErrFailedPrecondition, []string{"the key file KEYFILE does not exist, but the database", "holds 1 secrets", "restore the key file"}},
		{"version in use missing", func(t *testing.T, e *env) KeySource {
			ring, _ := newKeyring(2, map[int][]byte{2: randomKey()})
			writeFile(t, e.keys.File, ring.marshal())
			return e.keys
		}, errdefs.ErrFailedPrecondition, []string{"1 secrets in the database", "under key version 1, which the key file KEYFILE does not have", `"key 1 …"`}},
		{"readable by others", func(t *testing.T, e *env) KeySource {
			os.Chmod(e.keys.File, 0o644)
			return e.keys
		}, errdefs.ErrFailedPrecondition, []string{"has mode 0644", "chmod 600 KEYFILE"}},
		{"environment and file", func(t *testing.T, e *env) KeySource {
			return KeySource{File: e.keys.File, Env: otherKey}
		}, errdefs.ErrFailedPrecondition, []string{"both PADDOCK_SECRETS_KEY and the key file KEYFILE are set"}},
		{"malformed key file", func(t *testing.T, e *env) KeySource {
			writeFile(t, e.keys.File, []byte("paddock-keyring 1\nprimary 1\nkey 1 c2hvcnQ=\n"))
			return e.keys
		}, errdefs.ErrInvalidArgument, []string{"KEYFILE: line 3: key 1: want standard base64 of 32 bytes"}},
		{"malformed environment key", func(t *testing.T, e *env) KeySource {
			os.Remove(e.keys.File)
			return KeySource{File: e.keys.File, Env: "not-a-key"}
		}, errdefs.ErrInvalidArgument, []string{"PADDOCK_SECRETS_KEY: want standard base64 of 32 random bytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.put(t, "alice", "a", "v")
			before := dump(t, e)
			keys := tt.setup(t, e)
			_, err := Open(context.Background(), e.st, keys, nil)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Open: %v; want %v", err, tt.want)
			}
			for _, m := range tt.msgs {
				if m = strings.ReplaceAll(m, "KEYFILE", e.keys.File); !strings.Contains(err.Error(), m) {
					t.Errorf("Open: %v\nwant it to contain %q", err, m)
				}
			}
			if strings.Contains(err.Error(), otherKey) || strings.Contains(err.Error(), "c2hvcnQ=") {
				t.Errorf("the error shows a key: %v", err)
			}
			if after := dump(t, e); after != before {
				t.Errorf("a refused Open changed the database:\n%s\n%s", before, after)
			}
		})
	}
}

// dump is the secrets tables' content.
func dump(t *testing.T, e *env) string {
	t.Helper()
	var out string
	err := e.sql(t).QueryRow(`SELECT coalesce((SELECT group_concat(version || ':' || hex(check_ct)) FROM secret_keys), '') || '|' ||
		coalesce((SELECT group_concat(name || ':' || key_version || ':' || hex(ciphertext)) FROM secrets), '')`).Scan(&out)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestEnvironmentKey(t *testing.T) {
	key := base64.StdEncoding.EncodeToString(randomKey())
	dir := t.TempDir()
	st, err := store.Open(context.Background(), filepath.Join(dir, "paddock.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	keys := KeySource{File: filepath.Join(dir, KeyFileName), Env: key}
	s, err := Open(context.Background(), st, keys, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(keys.File); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("with %s set, a key file was made: %v", EnvKey, err)
	}
	if _, err := s.RotateKey(context.Background()); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "put the key in a key file") {
		t.Errorf("RotateKey with an environment key: %v", err)
	}
	// The same key as a one-line keyring in the variable is the same key.
	ring := fmt.Sprintf("paddock-keyring 1\nprimary 1\nkey 1 %s\n", key)
	if _, err := Open(context.Background(), st, KeySource{File: keys.File, Env: ring}, nil); err != nil {
		t.Errorf("Open with the keyring form: %v", err)
	}
}

func TestRotateKey(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.put(t, "alice", "a", "alice a")
	e.put(t, "alice", "b", "alice b")
	e.put(t, "bob", "a", "bob a")
	oldFile, _ := os.ReadFile(e.keys.File)
	rot, err := e.s.RotateKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rot.From != 1 || rot.To != 2 || rot.Reencrypted != 3 || fmt.Sprint(rot.Retained) != "[1]" || rot.KeyFile != e.keys.File {
		t.Fatalf("rotation %+v", rot)
	}
	db := e.sql(t)
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM secrets WHERE key_version <> 2`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows not under key 2 (%v)", n, err)
	}
	data, _ := os.ReadFile(e.keys.File)
	ring, err := parseKeyring(data)
	if err != nil || ring.primary != 2 || fmt.Sprint(ring.versions()) != "[1 2]" {
		t.Fatalf("key file after rotation: %v, %+v", err, ring)
	}
	for _, c := range []struct{ user, name, want string }{{"alice", "a", "alice a"}, {"alice", "b", "alice b"}, {"bob", "a", "bob a"}} {
		if got, err := e.get(c.user, c.name); err != nil || got != c.want {
			t.Errorf("Get(%s, %s) after rotation: %q, %v", c.user, c.name, got, err)
		}
	}
	info := e.put(t, "alice", "c", "new")
	if info.Version != 1 {
		t.Errorf("put after rotation: %+v", info)
	}
	if err := db.QueryRow(`SELECT key_version FROM secrets WHERE name = 'c'`).Scan(&n); err != nil || n != 2 {
		t.Errorf("a new value is under key %d (%v), want 2", n, err)
	}
	// The audit log has the rotation, the versions only.
	evs, err := e.st.ListAudit(ctx, store.AuditFilter{Action: "secrets.key.rotate"})
	if err != nil || len(evs) != 1 || fmt.Sprint(evs[0].Detail) != "map[from:1 reencrypted:3 to:2]" {
		t.Fatalf("audit: %+v, %v", evs, err)
	}
	// The key file from before the rotation no longer opens the database: precisely.
	writeFile(t, e.keys.File, oldFile)
	if _, err := Open(ctx, e.st, e.keys, nil); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "under key version 2") {
		t.Fatalf("Open with the old key file: %v", err)
	}
	writeFile(t, e.keys.File, data)
	// A second rotation moves everything to 3 and keeps 1 and 2.
	if rot, err = e.s.RotateKey(ctx); err != nil || rot.From != 2 || rot.To != 3 || rot.Reencrypted != 4 || fmt.Sprint(rot.Retained) != "[1 2]" {
		t.Fatalf("second rotation: %+v, %v", rot, err)
	}
}

// Another process (`paddock secrets rotate-key`) rotates while a server runs: the
// server's next read meets the new key version and re-reads the key file; its next put
// uses the new primary.
func TestRotationByAnotherProcess(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.put(t, "alice", "a", "v")
	cli := e.mustOpen(t)
	if _, err := cli.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := e.get("alice", "a"); err != nil || got != "v" {
		t.Fatalf("the server's Get after another process rotated: %q, %v", got, err)
	}
	if _, err := cli.RotateKey(ctx); err != nil { // 3, while the server is at 2
		t.Fatal(err)
	}
	e.put(t, "alice", "b", "w")
	var kv int
	if err := e.sql(t).QueryRow(`SELECT key_version FROM secrets WHERE name = 'b'`).Scan(&kv); err != nil || kv != 3 {
		t.Fatalf("the server's put is under key %d (%v), want 3", kv, err)
	}
}

// A rotation that wrote the key file and then failed leaves rows under the old key; they
// are re-encrypted under the new primary when read.
func TestLazyReencryption(t *testing.T) {
	e := newEnv(t)
	e.put(t, "alice", "a", "v")
	data, _ := os.ReadFile(e.keys.File)
	ring, _ := parseKeyring(data)
	writeFile(t, e.keys.File, ring.withKey(2).marshal()) // the file of a rotation whose transaction never committed
	e.s = e.mustOpen(t)
	db := e.sql(t)
	kv := func() int {
		var v int
		if err := db.QueryRow(`SELECT key_version FROM secrets WHERE name = 'a'`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if kv() != 1 {
		t.Fatal("the row moved before it was read")
	}
	if got, err := e.get("alice", "a"); err != nil || got != "v" {
		t.Fatalf("Get: %q, %v", got, err)
	}
	if kv() != 2 {
		t.Fatalf("after a read the row is under key %d, want 2", kv())
	}
	if got, err := e.get("alice", "a"); err != nil || got != "v" {
		t.Fatalf("Get after re-encryption: %q, %v", got, err)
	}
}

// A value printed, logged or marshalled by mistake shows nothing.
func TestValueRedaction(t *testing.T) {
	e := newEnv(t)
	const canary = "canary-7f3a9c1e-value"
	e.put(t, "alice", "a", canary)
	v, info, err := e.s.Get(context.Background(), e.users["alice"], "a")
	if err != nil {
		t.Fatal(err)
	}
	type holder struct {
		Name  string
		Value Value
		Ptr   *Value
	}
	h := holder{Name: info.Name, Value: v, Ptr: &v}
	var outputs []string
	for _, f := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T"} {
		outputs = append(outputs, fmt.Sprintf(f, v), fmt.Sprintf(f, h), fmt.Sprintf(f, &v))
	}
	outputs = append(outputs, fmt.Sprint(v), fmt.Sprintln(h), v.String(), v.GoString())
	j, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	outputs = append(outputs, string(j))
	var logs bytes.Buffer
	for _, hd := range []slog.Handler{slog.NewJSONHandler(&logs, nil), slog.NewTextHandler(&logs, nil)} {
		l := slog.New(hd)
		l.Info("oops", "value", v, "holder", h, "ptr", &v)
		l.Info("oops", slog.Any("value", v), slog.Group("g", "value", v))
	}
	outputs = append(outputs, logs.String())
	for _, out := range outputs {
		if strings.Contains(out, canary) || strings.Contains(out, fmt.Sprintf("%x", canary)) || strings.Contains(out, fmt.Sprint([]byte(canary))) {
			t.Errorf("the value shows: %s", out)
		}
	}
	if !strings.Contains(string(j), `"Value":"[redacted]"`) || !strings.Contains(logs.String(), `"value":"[redacted]"`) {
		t.Errorf("no redaction shown: %s\n%s", j, logs.String())
	}
	if string(v.Reveal()) != canary || v.Len() != len(canary) {
		t.Error("Reveal does not give the value")
	}
	// Reveal hands out a copy: changing it changes nothing stored.
	r := v.Reveal()
	r[0] = 'X'
	if string(v.Reveal()) != canary {
		t.Error("Reveal aliases the value")
	}
	// A KeySource prints its description, never its key.
	ks := KeySource{File: "/f", Env: "c2VjcmV0LWtleS1tYXRlcmlhbC0xMjM0NTY3ODkwMTI="}
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(f, ks); strings.Contains(out, ks.Env) {
			t.Errorf("%s of a KeySource shows the key: %s", f, out)
		}
	}
}

// The data dir's files never hold a value in the clear: not the database, not its WAL,
// not the key file; and the audit log has names and versions only.
func TestNoPlaintextAtRest(t *testing.T) {
	e := newEnv(t)
	const canary = "canary-5e2d-plaintext-must-not-be-on-disk"
	e.put(t, "alice", "a", canary)
	e.put(t, "alice", "a", canary+"-2")
	e.put(t, "alice", "b", canary)
	if err := e.s.Delete(context.Background(), e.users["alice"], "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.RotateKey(context.Background()); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		files, _ := filepath.Glob(filepath.Join(e.dir, "*"))
		if len(files) < 2 {
			t.Fatalf("files %v", files)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(data, []byte("canary-5e2d")) {
				t.Errorf("%s: %s holds the value in the clear", when, f)
			}
		}
	}
	check("open")
	evs, err := e.st.ListAudit(context.Background(), store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	actions := map[string]int{}
	for _, ev := range evs {
		actions[ev.Action]++
		if strings.Contains(fmt.Sprint(ev), "canary") {
			t.Errorf("audit event shows the value: %+v", ev)
		}
	}
	if actions["secret.put"] != 3 || actions["secret.delete"] != 1 {
		t.Errorf("audit actions %v", actions)
	}
	e.st.Close() // checkpoints the WAL into the database file
	check("closed")
}

// Puts, reads and rotations at once (run with -race): every value reads back as last
// put, and at the end every row is under the last primary.
func TestConcurrentUseAndRotation(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	errs := make(chan error, 64)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			name := fmt.Sprintf("w%d", w)
			for i := range 15 {
				want := fmt.Sprintf("%s-%d", name, i)
				if _, err := e.s.Put(ctx, e.users["alice"], name, []byte(want)); err != nil {
					errs <- err
					return
				}
				if got, err := e.get("alice", name); err != nil || got != want {
					errs <- fmt.Errorf("%s: got %q, %v; want %q", name, got, err, want)
					return
				}
			}
		})
	}
	wg.Go(func() {
		other := e.mustOpen(t) // as `paddock secrets rotate-key` in another process
		for range 3 {
			if _, err := other.RotateKey(ctx); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for w := range 4 {
		if got, err := e.get("alice", fmt.Sprintf("w%d", w)); err != nil || got != fmt.Sprintf("w%d-14", w) {
			t.Errorf("w%d at the end: %q, %v", w, got, err)
		}
	}
	// Whatever a put wrote under an older primary in between is moved by the last read
	// or the next rotation.
	if _, err := e.s.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := e.sql(t).QueryRow(`SELECT count(*) FROM secrets WHERE key_version <> 5`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d rows not under key 5 (%v)", n, err)
	}
}
