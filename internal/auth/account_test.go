package auth

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store"
)

func TestRegister(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	reg := e.register(t, "Alice")
	if reg.User.Username != "Alice" || reg.User.Role != store.RoleUser || reg.User.ID == "" {
		t.Errorf("user = %+v", reg.User)
	}
	if len(reg.RecoveryCodes) != RecoveryCodeCount {
		t.Fatalf("%d recovery codes, want %d", len(reg.RecoveryCodes), RecoveryCodeCount)
	}
	seen := map[RecoveryCode]bool{}
	for _, c := range reg.RecoveryCodes {
		if seen[c] {
			t.Error("duplicate recovery code")
		}
		seen[c] = true
		if _, err := ParseRecoveryCode(c.Reveal()); err != nil {
			t.Errorf("issued code does not parse: %v", err)
		}
	}
	if n, _ := e.st.UnusedRecoveryCodes(ctx, reg.User.ID); n != RecoveryCodeCount {
		t.Errorf("%d stored codes", n)
	}
	for _, tc := range []struct {
		name string
		req  RegisterRequest
		want error
		msg  string
	}{
		{"taken, other case", RegisterRequest{Username: "alice", Password: goodPassword}, errdefs.ErrAlreadyExists, "taken"},
		{"bad username", RegisterRequest{Username: "a b", Password: goodPassword}, errdefs.ErrInvalidArgument, "username"},
		{"short password", RegisterRequest{Username: "bob", Password: "short"}, errdefs.ErrInvalidArgument, "too short"},
		{"password is username", RegisterRequest{Username: "bobbybobbybob", Password: "BobbyBobbyBob"}, errdefs.ErrInvalidArgument, "username"},
		{"bad role", RegisterRequest{Username: "bob", Password: goodPassword, Role: "root"}, errdefs.ErrInvalidArgument, "role"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.svc.Register(ctx, tc.req)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %v, want %v mentioning %q", err, tc.want, tc.msg)
			}
		})
	}
	admin, err := e.svc.Register(ctx, RegisterRequest{Username: "root", Password: goodPassword, Role: store.RoleAdmin})
	if err != nil || !admin.User.IsAdmin() {
		t.Errorf("admin registration: %+v, %v", admin, err)
	}
	stored, _ := e.st.UserByUsername(ctx, "alice")
	if ok, _ := VerifyPassword(stored.PasswordHash, goodPassword); !ok {
		t.Error("stored hash does not verify the registered password")
	}
}

func TestLogin(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.register(t, "alice")
	for _, tc := range []struct {
		name     string
		user     string
		pw       Password
		wantErr  error
		sameAsWP bool // must be indistinguishable from a wrong password
	}{
		{"right password", "alice", goodPassword, nil, false},
		{"username in other case", "ALICE", goodPassword, nil, false},
		{"wrong password", "alice", "correct horse battery stapl", ErrInvalidCredentials, true},
		{"unknown user", "mallory", goodPassword, ErrInvalidCredentials, true},
		{"invalid username", "not a name!", goodPassword, ErrInvalidCredentials, true},
		{"empty password", "alice", "", ErrInvalidCredentials, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sess, err := e.svc.Login(ctx, LoginRequest{Username: tc.user, Password: tc.pw, Client: home})
			if tc.wantErr == nil {
				if err != nil || sess == nil || sess.User.Username != "alice" || sess.ID == "" {
					t.Fatalf("Login = %+v, %v", sess, err)
				}
				return
			}
			if sess != nil || err != tc.wantErr {
				t.Errorf("Login = %v, %v; want exactly %v", sess, err, tc.wantErr)
			}
			if !errors.Is(err, errdefs.ErrUnauthenticated) {
				t.Errorf("%v is not in the taxonomy", err)
			}
		})
	}
	s1, s2 := e.login(t, "alice"), e.login(t, "alice")
	if s1.ID == s2.ID {
		t.Error("two logins share a session ID")
	}
}

// TestNoEnumerationTiming checks that an unknown username costs an Argon2
// verification like a known one: without the dummy hash it would return in
// microseconds against milliseconds.
func TestNoEnumerationTiming(t *testing.T) {
	slow := Params{Memory: 8 * 1024, Time: 2, Threads: 1, SaltLen: 16, KeyLen: 32}
	e := newEnv(t, WithParams(slow), WithLoginLimits(1000, 1000, time.Minute))
	e.register(t, "alice")
	ctx := context.Background()
	// Interleaved with one Argon2 verification alone (the floor), each the fastest of
	// several runs: the minimum is what survives noise from other work on the machine,
	// and interleaving keeps a burst of load from landing on one side only.
	h := HashPassword("x", slow)
	var known, unknown, argon time.Duration
	fastest := func(min *time.Duration, d time.Duration) {
		if *min == 0 || d < *min {
			*min = d
		}
	}
	for range 7 {
		for _, user := range []string{"alice", "mallory"} {
			start := time.Now()
			_, err := e.svc.Login(ctx, LoginRequest{Username: user, Password: "wrong wrong wrong", Client: home})
			d := time.Since(start)
			if err != ErrInvalidCredentials {
				t.Fatalf("Login(%s) = %v", user, err)
			}
			if user == "alice" {
				fastest(&known, d)
			} else {
				fastest(&unknown, d)
			}
		}
		start := time.Now()
		_, _ = VerifyPassword(h, "y")
		fastest(&argon, time.Since(start))
	}
	t.Logf("fastest: Argon2 verify %v; wrong-password login: known user %v, unknown user %v", argon, known, unknown)
	if floor := min(argon, known); unknown < floor*7/10 {
		t.Errorf("unknown user answered in %v, under one Argon2 verification (%v) and a known user's answer (%v): timing reveals which accounts exist", unknown, argon, known)
	}
}

func TestLoginRehashesOutdatedHash(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.register(t, "alice")
	newer := Params{Memory: 128, Time: 2, Threads: 1, SaltLen: 16, KeyLen: 32}
	svc2 := New(e.st, WithParams(newer), WithClock(e.clk.now))
	if _, err := svc2.Login(ctx, LoginRequest{Username: "alice", Password: goodPassword, Client: home}); err != nil {
		t.Fatalf("login with old-parameter hash: %v", err)
	}
	u, _ := e.st.UserByUsername(ctx, "alice")
	if NeedsRehash(u.PasswordHash, newer) {
		t.Errorf("hash %q not upgraded to the new parameters", u.PasswordHash)
	}
	if _, err := svc2.Login(ctx, LoginRequest{Username: "alice", Password: goodPassword, Client: home}); err != nil {
		t.Fatalf("login after rehash: %v", err)
	}
	evs, _ := e.st.ListAudit(ctx, store.AuditFilter{Action: "auth.login.success"})
	if len(evs) != 2 || evs[1].Detail["rehashed"] != true || evs[0].Detail["rehashed"] != false {
		t.Errorf("audit: %+v", evs)
	}
}

func TestCorruptStoredHashIsAWrongPassword(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	reg := e.register(t, "alice")
	_ = e.st.Update(ctx, func(tx *store.Tx) error { return tx.SetPasswordHash(ctx, reg.User.ID, "$argon2id$garbage") })
	if _, err := e.svc.Login(ctx, LoginRequest{Username: "alice", Password: goodPassword, Client: home}); err != ErrInvalidCredentials {
		t.Errorf("Login = %v, want ErrInvalidCredentials", err)
	}
}

// TestLoginRateLimit: failures on one account from one address back off, doubling;
// the account's owner at another address is not locked out.
func TestLoginRateLimit(t *testing.T) {
	eachStore(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.register(t, "alice")
		wrong := func(user string, c Client) error {
			_, err := e.svc.Login(ctx, LoginRequest{Username: user, Password: "wrong wrong wrong", Client: c})
			return err
		}
		for i := range 5 {
			if err := wrong("alice", home); err != ErrInvalidCredentials {
				t.Fatalf("failure %d: %v", i+1, err)
			}
		}
		// The pair is throttled: the 6th attempt from home waits a second after the 5th.
		var le *LimitedError
		_, err := e.svc.Login(ctx, LoginRequest{Username: "alice", Password: goodPassword, Client: home})
		if !errors.As(err, &le) || !errors.Is(err, errdefs.ErrLimitExceeded) || !strings.Contains(err.Error(), "try again in") {
			t.Fatalf("6th attempt from the same address: %v, want *LimitedError saying when", err)
		}
		if le.RetryAfter > 2*time.Second {
			t.Errorf("first backoff %v, want about 1s", le.RetryAfter)
		}
		// Alice, elsewhere, signs in at once.
		if _, err := e.svc.Login(ctx, LoginRequest{Username: "alice", Password: goodPassword, Client: other}); err != nil {
			t.Fatalf("the owner at another address: %v, want signed in", err)
		}
		// Each further failure doubles the wait: 1s, 2s, 4s, ... up to 15 minutes.
		var waits []time.Duration
		for range 14 {
			e.clk.advance(le.RetryAfter)
			if err := wrong("alice", home); err != ErrInvalidCredentials {
				t.Fatalf("after waiting %v: %v", le.RetryAfter, err)
			}
			if err := wrong("alice", home); !errors.As(err, &le) {
				t.Fatalf("right after a failure past the free ones: %v, want limited", err)
			}
			waits = append(waits, le.RetryAfter)
		}
		for i := 1; i < len(waits); i++ {
			if waits[i] < waits[i-1] || waits[i] > 15*time.Minute+time.Second {
				t.Errorf("waits %v: want doubling up to 15m", waits)
				break
			}
		}
		if last := waits[len(waits)-1]; last < 14*time.Minute {
			t.Errorf("after 19 failures the wait is %v, want the 15m cap", last)
		}
		// Unknown and other accounts are limited separately.
		if err := wrong("bob", home); err != ErrInvalidCredentials {
			t.Errorf("another account: %v", err)
		}
		// The limit survives a restart: a new Service on the same store sees it.
		svc2 := New(e.st, WithParams(cheap), WithClock(e.clk.now))
		if _, err := svc2.Login(ctx, LoginRequest{Username: "alice", Password: goodPassword, Client: home}); !errors.As(err, &le) {
			t.Errorf("after restart: %v, want limited", err)
		}
		// A success from home after the wait clears the pair's failures: 5 free ones again.
		e.clk.advance(le.RetryAfter)
		if _, err := e.svc.Login(ctx, LoginRequest{Username: "alice", Password: goodPassword, Client: home}); err != nil {
			t.Fatalf("after the wait: %v", err)
		}
		for i := range 5 {
			if err := wrong("alice", home); err != ErrInvalidCredentials {
				t.Fatalf("failure %d after success: %v", i+1, err)
			}
		}
		if err := wrong("alice", home); !errors.As(err, &le) {
			t.Errorf("6th failure after success: %v, want limited", err)
		}
		evs, _ := e.st.ListAudit(ctx, store.AuditFilter{Action: "auth.login.limited"})
		if len(evs) < 2 {
			t.Errorf("limited attempts not audited: %d events", len(evs))
		}
	})
}

func TestAddressRateLimit(t *testing.T) {
	e := newEnv(t, WithLoginLimits(5, 20, 15*time.Minute))
	ctx := context.Background()
	e.register(t, "alice")
	v6a := Client{Addr: netip.MustParseAddr("2001:db8:1:2::1")}
	v6b := Client{Addr: netip.MustParseAddr("2001:db8:1:2:ffff::9")} // same /64
	v6c := Client{Addr: netip.MustParseAddr("2001:db8:1:3::1")}      // another /64
	for i := range 20 {
		c := v6a
		if i%2 == 1 {
			c = v6b
		}
		// A different (unknown) username each time: only the address bucket fills.
		_, err := e.svc.Login(ctx, LoginRequest{Username: "user" + strings.Repeat("x", i%30) + string(rune('a'+i%26)), Password: "wrong", Client: c})
		if err != ErrInvalidCredentials {
			t.Fatalf("attempt %d: %v", i+1, err)
		}
	}
	var le *LimitedError
	if _, err := e.svc.Login(ctx, LoginRequest{Username: "alice", Password: goodPassword, Client: v6b}); !errors.As(err, &le) {
		t.Errorf("21st attempt from the same /64: %v, want limited", err)
	}
	if _, err := e.svc.Login(ctx, LoginRequest{Username: "alice", Password: goodPassword, Client: v6c}); err != nil {
		t.Errorf("another /64: %v", err)
	}
}

func TestRecovery(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	reg := e.register(t, "alice")
	bob := e.register(t, "bob")
	sess := e.login(t, "alice")
	newPW := Password("a brand new passphrase")
	code := reg.RecoveryCodes[3].Reveal()
	doRecover := func(user, code string, pw Password) error {
		return e.svc.Recover(ctx, RecoverRequest{Username: user, Code: RecoveryCode(code), NewPassword: pw, Client: home})
	}

	for _, tc := range []struct {
		name, user, code string
		pw               Password
		want             error
	}{
		{"wrong code", "alice", "0000-0000-0000-0000-0000-0000", newPW, ErrInvalidCredentials},
		{"malformed code", "alice", "hello", newPW, ErrInvalidCredentials},
		{"another user's code", "alice", bob.RecoveryCodes[0].Reveal(), newPW, ErrInvalidCredentials},
		{"unknown user", "mallory", code, newPW, ErrInvalidCredentials},
		{"weak new password", "alice", code, "short", errdefs.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := doRecover(tc.user, tc.code, tc.pw); !errors.Is(err, tc.want) {
				t.Errorf("Recover = %v, want %v", err, tc.want)
			}
		})
	}
	if n, _ := e.st.UnusedRecoveryCodes(ctx, reg.User.ID); n != RecoveryCodeCount {
		t.Fatalf("failed recoveries consumed codes: %d left", n)
	}
	// Typed back sloppily: upper case, spaces instead of dashes.
	typed := strings.ToUpper(strings.ReplaceAll(code, "-", " "))
	if err := doRecover("alice", typed, newPW); err != nil {
		t.Fatalf("Recover with a valid code: %v", err)
	}
	if _, err := e.svc.Session(ctx, sess.ID); err != ErrUnauthenticated {
		t.Errorf("session from before recovery still valid: %v", err)
	}
	if _, err := e.svc.Login(ctx, LoginRequest{Username: "alice", Password: goodPassword, Client: other}); err != ErrInvalidCredentials {
		t.Errorf("old password after recovery: %v", err)
	}
	if _, err := e.svc.Login(ctx, LoginRequest{Username: "alice", Password: newPW, Client: other}); err != nil {
		t.Errorf("new password after recovery: %v", err)
	}
	if err := doRecover("alice", code, "yet another passphrase"); err != ErrInvalidCredentials {
		t.Errorf("replayed code: %v, want ErrInvalidCredentials", err)
	}
	if n, _ := e.st.UnusedRecoveryCodes(ctx, reg.User.ID); n != RecoveryCodeCount-1 {
		t.Errorf("%d codes left, want %d", n, RecoveryCodeCount-1)
	}
	codes, err := e.svc.RegenerateRecoveryCodes(ctx, reg.User.ID)
	if err != nil || len(codes) != RecoveryCodeCount {
		t.Fatalf("regenerate: %d, %v", len(codes), err)
	}
	if err := doRecover("alice", reg.RecoveryCodes[0].Reveal(), "yet another passphrase"); err != ErrInvalidCredentials {
		t.Errorf("code from before regeneration: %v", err)
	}
	if err := doRecover("alice", codes[0].Reveal(), "yet another passphrase"); err != nil {
		t.Errorf("regenerated code: %v", err)
	}
}

func TestRecoveryIsRateLimited(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	reg := e.register(t, "alice")
	for range 5 {
		_ = e.svc.Recover(ctx, RecoverRequest{Username: "alice", Code: "0000-0000-0000-0000-0000-0000", NewPassword: "a brand new passphrase", Client: home})
	}
	err := e.svc.Recover(ctx, RecoverRequest{Username: "alice", Code: reg.RecoveryCodes[0], NewPassword: "a brand new passphrase", Client: home})
	if !errors.Is(err, errdefs.ErrLimitExceeded) {
		t.Errorf("6th recovery: %v, want limited", err)
	}
}

func TestParseRecoveryCode(t *testing.T) {
	for in, want := range map[string]string{
		"abcd-efgh-jkmn-pqrs-tvwx-yz01": "abcdefghjkmnpqrstvwxyz01",
		"ABCD EFGH JKMN PQRS TVWX YZ01": "abcdefghjkmnpqrstvwxyz01",
		"abcdefghjkmnpqrstvwxyzOI":      "abcdefghjkmnpqrstvwxyz01",
		"abcd-efgh-jkmn-pqrs-tvwx-yzlL": "abcdefghjkmnpqrstvwxyz11",
		"abcd-efgh-jkmn-pqrs-tvwx-yz0":  "",
		"abcd-efgh-jkmn-pqrs-tvwx-yz0u": "",
		"abcd-efgh-jkmn-pqrs-tvwx-yz0é": "",
		"":                              "",
	} {
		got, err := ParseRecoveryCode(in)
		if string(got) != want || (err == nil) != (want != "") {
			t.Errorf("ParseRecoveryCode(%q) = %q, %v; want %q", in, got.Reveal(), err, want)
		}
	}
}

func TestAuditTrail(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	reg := e.register(t, "alice")
	sess := e.login(t, "alice")
	_, _ = e.svc.Login(ctx, LoginRequest{Username: "alice", Password: "wrong password!", Client: home})
	tok, info, err := e.svc.CreateAPIToken(ctx, reg.User, TokenSpec{Name: "laptop"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.svc.RevokeAPIToken(ctx, reg.User.ID, info.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Logout(ctx, sess); err != nil {
		t.Fatal(err)
	}
	newPW := Password("a brand new passphrase")
	if err := e.svc.Recover(ctx, RecoverRequest{Username: "alice", Code: reg.RecoveryCodes[0], NewPassword: newPW, Client: home}); err != nil {
		t.Fatal(err)
	}
	_ = e.svc.Recover(ctx, RecoverRequest{Username: "alice", Code: reg.RecoveryCodes[0], NewPassword: newPW, Client: home})
	evs, err := e.st.ListAudit(ctx, store.AuditFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, ev := range evs {
		actions = append(actions, ev.Action)
	}
	sort.Strings(actions)
	want := []string{"auth.login.failure", "auth.login.success", "auth.logout", "auth.recovery.failure", "auth.recovery.success",
		"auth.register", "auth.token.create", "auth.token.revoke"}
	if !slices.Equal(actions, want) {
		t.Errorf("audit actions %v, want %v", actions, want)
	}
	secrets := []string{string(goodPassword), string(newPW), "wrong password!", sess.ID.Reveal(), tok.Reveal()}
	for _, c := range reg.RecoveryCodes {
		secrets = append(secrets, c.Reveal(), strings.ReplaceAll(c.Reveal(), "-", ""))
	}
	for _, ev := range evs {
		dump := ev.Action + ev.Target + ev.ActorUserID + formatDetail(ev.Detail)
		for _, s := range secrets {
			if strings.Contains(dump, s) {
				t.Errorf("audit event %s contains a secret", ev.Action)
			}
		}
	}
}

func formatDetail(d map[string]any) string {
	var b strings.Builder
	for k, v := range d {
		b.WriteString(k)
		b.WriteString("=")
		b.WriteString(strings.TrimSpace(strings.ReplaceAll(strings.ReplaceAll(sprint(v), "\n", ""), " ", "")))
	}
	return b.String()
}

// TestRateLimitHoldsUnderConcurrency fires many wrong guesses at once: exactly the
// allowance gets checked, however many are in flight.
func TestRateLimitHoldsUnderConcurrency(t *testing.T) {
	eachStore(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.register(t, "alice")
		const n = 30
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				_, err := e.svc.Login(ctx, LoginRequest{Username: "alice", Password: "wrong wrong wrong", Client: home})
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		var checked, limited int
		for err := range errs {
			switch {
			case err == ErrInvalidCredentials:
				checked++
			case errors.Is(err, errdefs.ErrLimitExceeded):
				limited++
			default:
				t.Errorf("unexpected: %v", err)
			}
		}
		if checked != 5 || limited != n-5 {
			t.Errorf("%d guesses checked, %d limited; want 5 and %d", checked, limited, n-5)
		}
	})
}

// TestConcurrentLogins: parallel correct logins (as many as the account allowance;
// attempts in flight count against it) all succeed with distinct sessions and
// leave nothing counted against the limits.
func TestConcurrentLogins(t *testing.T) {
	eachStore(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.register(t, "alice")
		const n = 5
		ids := make(chan SessionID, n)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				sess, err := e.svc.Login(ctx, LoginRequest{Username: "alice", Password: goodPassword, Client: home})
				if err != nil {
					t.Error(err)
					return
				}
				ids <- sess.ID
			})
		}
		wg.Wait()
		close(ids)
		seen := map[SessionID]bool{}
		for id := range ids {
			seen[id] = true
		}
		if len(seen) != n {
			t.Errorf("%d distinct sessions, want %d", len(seen), n)
		}
		for _, key := range []string{"ip:" + home.Addr.String(), "user:alice"} {
			if c, _, _ := e.st.LoginAttempts(ctx, key, time.Time{}); c != 0 {
				t.Errorf("%s: %d attempts still counted after successful logins", key, c)
			}
		}
		// And the next 5 logins in a row still succeed.
		for range 5 {
			e.login(t, "alice")
		}
	})
}

func TestChangePassword(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.register(t, "alice")
	sess, elsewhere := e.login(t, "alice"), e.login(t, "alice")
	next := Password("a completely new passphrase")
	for _, tc := range []struct {
		name          string
		current, next Password
		want          error
	}{
		{"wrong current password", "not my password", next, ErrInvalidCredentials},
		{"weak new password", goodPassword, "short", errdefs.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := e.svc.ChangePassword(ctx, sess, tc.current, tc.next, home); !errors.Is(err, tc.want) {
				t.Errorf("ChangePassword = %v, want %v", err, tc.want)
			}
		})
	}
	if err := e.svc.ChangePassword(ctx, sess, goodPassword, next, home); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Session(ctx, sess.ID); err != nil {
		t.Errorf("the session that changed the password was signed out: %v", err)
	}
	if _, err := e.svc.Session(ctx, elsewhere.ID); err != ErrUnauthenticated {
		t.Errorf("other session survived a password change: %v", err)
	}
	if _, err := e.svc.Login(ctx, LoginRequest{Username: "alice", Password: goodPassword, Client: home}); err != ErrInvalidCredentials {
		t.Errorf("old password: %v", err)
	}
	if _, err := e.svc.Login(ctx, LoginRequest{Username: "alice", Password: next, Client: home}); err != nil {
		t.Errorf("new password: %v", err)
	}
}
