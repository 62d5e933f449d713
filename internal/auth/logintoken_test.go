package auth

import (
	"context"
	"errors"
	"testing"

	"github.com/paddockhq/paddock/internal/store"
)

// LoginToken is a sign-in: it shares Login's answers and Login's limits, so the
// token endpoint is no side door for password guessing.
func TestLoginToken(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	reg := e.register(t, "alice")
	req := LoginRequest{Username: "alice", Password: goodPassword, Client: home}

	tok, info, err := e.svc.LoginToken(ctx, req, "  laptop CLI ")
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "laptop CLI" || info.UserID != reg.User.ID {
		t.Errorf("token record %+v", info)
	}
	u, _, err := e.svc.AuthenticateToken(ctx, tok)
	if err != nil || u.ID != reg.User.ID {
		t.Fatalf("authenticate new token: %v, %v", u, err)
	}
	if _, _, err := e.svc.LoginToken(ctx, req, ""); !errors.Is(err, errInvalid) {
		t.Errorf("empty name: %v, want invalid argument", err)
	}

	bad := req
	bad.Password = "wrong wrong wrong"
	for i := range 3 {
		if _, _, err := e.svc.LoginToken(ctx, bad, "cli"); err != ErrInvalidCredentials {
			t.Fatalf("failure %d: %v", i+1, err)
		}
	}
	for i := range 2 { // the same account bucket as Login's
		if _, err := e.svc.Login(ctx, bad); err != ErrInvalidCredentials {
			t.Fatalf("login failure %d: %v", i+1, err)
		}
	}
	var le *LimitedError
	if _, _, err := e.svc.LoginToken(ctx, req, "cli"); !errors.As(err, &le) {
		t.Fatalf("6th attempt: %v, want limited", err)
	}
	for _, action := range []string{"auth.token_login.success", "auth.token_login.failure", "auth.token_login.limited", "auth.token.create"} {
		if evs, _ := e.st.ListAudit(ctx, store.AuditFilter{Action: action}); len(evs) == 0 {
			t.Errorf("no %s event", action)
		}
	}
}
