package auth

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store"
)

func TestTokenExpiry(t *testing.T) {
	e := newEnv(t, WithTokenLifetime(24*time.Hour, 48*time.Hour))
	ctx := context.Background()
	alice := e.register(t, "alice")
	tok, info, err := e.svc.CreateAPIToken(ctx, alice.User, TokenSpec{Name: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if want := e.clk.now().Add(24 * time.Hour); !info.ExpiresAt.Equal(want) {
		t.Errorf("default expiry %v, want %v", info.ExpiresAt, want)
	}
	if _, _, err := e.svc.CreateAPIToken(ctx, alice.User, TokenSpec{Name: "long", TTL: 49 * time.Hour}); !errors.Is(err, errdefs.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "tokens.max_ttl") {
		t.Errorf("a token past the maximum: %v, want 400 naming tokens.max_ttl", err)
	}
	if _, _, err := e.svc.AuthenticateToken(ctx, tok); err != nil {
		t.Fatalf("fresh token: %v", err)
	}
	e.clk.advance(24 * time.Hour)
	if _, _, err := e.svc.AuthenticateToken(ctx, tok); !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), "expired") {
		t.Errorf("token past its expiry: %v, want 401 saying it expired", err)
	}
}

func TestTokenScopesAndMinting(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	alice := e.register(t, "alice")
	root, err := e.svc.Register(ctx, RegisterRequest{Username: "root", Password: goodPassword, Role: store.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	_, info, err := e.svc.CreateAPIToken(ctx, alice.User, TokenSpec{Name: "default"})
	if err != nil || info.Scopes != "read write" {
		t.Fatalf("default scopes %q, %v; want read write", info.Scopes, err)
	}
	if _, _, err := e.svc.CreateAPIToken(ctx, alice.User, TokenSpec{Name: "x", Scopes: Scopes{ScopeAdmin}}); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("a user's token with scope admin: %v, want 403", err)
	}
	if _, _, err := e.svc.CreateAPIToken(ctx, root.User, TokenSpec{Name: "x", Scopes: Scopes{ScopeAdmin}}); err != nil {
		t.Errorf("an admin's token with scope admin: %v", err)
	}
	_, parent, err := e.svc.CreateAPIToken(ctx, alice.User, TokenSpec{Name: "parent", Scopes: Scopes{ScopeRead, ScopeTokens}, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		spec TokenSpec
		want error // nil: minted
		says string
	}{
		{"narrower", TokenSpec{Scopes: Scopes{ScopeRead}, TTL: time.Minute}, nil, ""},
		{"broader", TokenSpec{Scopes: Scopes{ScopeRead, ScopeWrite}}, errdefs.ErrPermissionDenied, `scope "write"`},
		{"longer", TokenSpec{Scopes: Scopes{ScopeRead}, TTL: 2 * time.Hour}, errdefs.ErrPermissionDenied, "outlive"},
		{"negative", TokenSpec{Scopes: Scopes{ScopeRead}, TTL: -time.Hour}, errdefs.ErrInvalidArgument, "negative"},
		{"no scopes", TokenSpec{Scopes: Scopes{}}, errdefs.ErrInvalidArgument, "at least one"},
		{"default lifetime", TokenSpec{Scopes: Scopes{ScopeRead}}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.Name, tc.spec.Parent = tc.name, &parent
			_, child, err := e.svc.CreateAPIToken(ctx, alice.User, tc.spec)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("minted by a token: %v", err)
				}
				if child.ExpiresAt.After(parent.ExpiresAt) {
					t.Errorf("child expires %v after its parent %v", child.ExpiresAt, parent.ExpiresAt)
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("err = %v, want %v saying %q", err, tc.want, tc.says)
			}
		})
	}
	evs, _ := e.st.ListAudit(ctx, store.AuditFilter{Action: "auth.token.refused"})
	if len(evs) != 3 { // the user's admin scope, broader, longer
		t.Errorf("%d auth.token.refused events, want 3", len(evs))
	}
}

// TestCredentialChangesRevokeTokens: a recovery and a password change end every API
// token of the user (a token made by whoever knew the old password must not outlive it).
func TestCredentialChangesRevokeTokens(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	alice := e.register(t, "alice")
	bob := e.register(t, "bob")
	tok, _, err := e.svc.CreateAPIToken(ctx, alice.User, TokenSpec{Name: "stolen"})
	if err != nil {
		t.Fatal(err)
	}
	bobTok, _, _ := e.svc.CreateAPIToken(ctx, bob.User, TokenSpec{Name: "bob"})
	next := Password("a brand new passphrase")
	if err := e.svc.Recover(ctx, RecoverRequest{Username: "alice", Code: alice.RecoveryCodes[0], NewPassword: next, Client: home}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.svc.AuthenticateToken(ctx, tok); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("token after recovery: %v, want revoked", err)
	}
	if _, _, err := e.svc.AuthenticateToken(ctx, bobTok); err != nil {
		t.Errorf("another user's token after alice's recovery: %v", err)
	}
	evs, _ := e.st.ListAudit(ctx, store.AuditFilter{Action: "auth.recovery.success"})
	if len(evs) != 1 || sprint(evs[0].Detail["tokens_revoked"]) != "1" {
		t.Errorf("recovery event %+v, want tokens_revoked 1", evs)
	}

	tok2, _, _ := e.svc.CreateAPIToken(ctx, alice.User, TokenSpec{Name: "second"})
	sess, err := e.svc.Login(ctx, LoginRequest{Username: "alice", Password: next, Client: home})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.svc.ChangePassword(ctx, sess, next, "yet another passphrase", home); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.svc.AuthenticateToken(ctx, tok2); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("token after a password change: %v, want revoked", err)
	}
}

func TestParseScopes(t *testing.T) {
	for in, want := range map[string]string{
		"read":                      "read",
		"write, read":               "read write",
		"admin tokens read read":    "read tokens admin",
		"":                          "",
		"read exec":                 "!",
		"READ":                      "!",
		strings.Repeat("read ", 60): "!",
	} {
		got, err := ParseScopes(in)
		if want == "!" {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("ParseScopes(%q) = %v, %v; want invalid", in, got, err)
			}
			continue
		}
		if err != nil || got.String() != want {
			t.Errorf("ParseScopes(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func FuzzParseScopes(f *testing.F) {
	for _, s := range []string{"read", "read,write", "tokens admin", " ,", "réad"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sc, err := ParseScopes(s)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error outside the taxonomy: %v", err)
			}
			return
		}
		again, err := ParseScopes(sc.String())
		if err != nil || again.String() != sc.String() {
			t.Fatalf("round trip %q -> %q -> %q, %v", s, sc, again, err)
		}
		for _, x := range sc {
			if !slices.Contains([]string{"read", "write", "tokens", "admin"}, string(x)) {
				t.Fatalf("unknown scope %q accepted", x)
			}
		}
	})
}

// FuzzCheckPasswordPolicy: any bytes get nil or a 400 in the taxonomy, never a panic,
// and the message never carries the password.
func FuzzCheckPasswordPolicy(f *testing.F) {
	for _, s := range []string{"correct horse battery staple", "aaaaaaaaaaaa", "0987654321098", "Password1234!", "\xff\xfe", "é"} {
		f.Add("alice", s)
	}
	f.Fuzz(func(t *testing.T, user, pw string) {
		err := CheckPasswordPolicy(user, Password(pw))
		if err == nil {
			return
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("error outside the taxonomy: %v", err)
		}
		if len(pw) >= 16 && strings.Contains(err.Error(), pw) { // shorter ones can be words of the message
			t.Fatalf("error %q echoes the password", err)
		}
	})
}
