package auth

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store"
)

func TestDefaultRegistration(t *testing.T) {
	for listen, want := range map[string]RegistrationMode{
		"127.0.0.1:8080": RegistrationOpen,
		"[::1]:8080":     RegistrationOpen,
		"localhost:8080": RegistrationOpen,
		"0.0.0.0:8080":   RegistrationInvite,
		":8080":          RegistrationInvite,
		"10.1.2.3:80":    RegistrationInvite,
		"[::]:8080":      RegistrationInvite,
	} {
		if got := DefaultRegistration(listen); got != want {
			t.Errorf("DefaultRegistration(%q) = %s, want %s", listen, got, want)
		}
	}
	if _, err := ParseRegistrationMode("maybe", ""); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a bad mode: %v", err)
	}
}

func TestSignUpModes(t *testing.T) {
	ctx := context.Background()
	signUp := func(e *env, name, invite string) error {
		_, err := e.svc.SignUp(ctx, SignUpRequest{Username: name, Password: goodPassword, Invite: invite, Client: home})
		return err
	}
	t.Run("closed", func(t *testing.T) {
		e := newEnv(t, WithRegistration(RegistrationClosed))
		err := signUp(e, "alice", "")
		if !errors.Is(err, errdefs.ErrPermissionDenied) || !strings.Contains(err.Error(), "registration: closed") {
			t.Errorf("closed: %v, want 403 naming the mode", err)
		}
		evs, _ := e.st.ListAudit(ctx, store.AuditFilter{Action: "auth.register.refused"})
		if len(evs) != 1 || evs[0].Detail["mode"] != "closed" {
			t.Errorf("events %+v, want one auth.register.refused with mode closed", evs)
		}
		// A flood of refusals writes an event now and then, counting the rest.
		for range 100 {
			_ = signUp(e, "alice", "")
		}
		e.clk.advance(gateEvery)
		_ = signUp(e, "alice", "")
		evs, _ = e.st.ListAudit(ctx, store.AuditFilter{Action: "auth.register.refused"})
		if len(evs) != 2 || sprint(evs[0].Detail["suppressed"]) != "100" {
			t.Errorf("after a flood: %d events, newest %+v; want 2, the newest counting 100 left out", len(evs), evs[0].Detail)
		}
	})
	t.Run("invite", func(t *testing.T) {
		e := newEnv(t, WithRegistration(RegistrationInvite))
		root, err := e.svc.Register(ctx, RegisterRequest{Username: "root", Password: goodPassword, Role: store.RoleAdmin})
		if err != nil {
			t.Fatal(err)
		}
		if err := signUp(e, "alice", ""); !errors.Is(err, errdefs.ErrPermissionDenied) || !strings.Contains(err.Error(), "registration: invite") {
			t.Errorf("no invite: %v, want 403 naming the mode", err)
		}
		if _, _, err := e.svc.CreateInvite(ctx, e.register(t, "mallory").User, InviteSpec{}); !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("a user making an invite: %v, want 403", err)
		}
		code, _, err := e.svc.CreateInvite(ctx, root.User, InviteSpec{Uses: 2, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := signUp(e, "alice", "inv_"+strings.Repeat("A", 32)); !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("an unknown invite: %v, want 403", err)
		}
		if err := signUp(e, "alice", "  "+code+" "); err != nil {
			t.Fatalf("first use: %v", err)
		}
		// A failed registration (a taken name) does not use the invite up.
		if err := signUp(e, "alice", code); !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Errorf("a taken name: %v", err)
		}
		if err := signUp(e, "bob", code); err != nil {
			t.Fatalf("second use: %v", err)
		}
		if err := signUp(e, "carol", code); !errors.Is(err, errdefs.ErrPermissionDenied) || !strings.Contains(err.Error(), "used up") {
			t.Errorf("third use of a two-use invite: %v, want 403", err)
		}
		late, _, _ := e.svc.CreateInvite(ctx, root.User, InviteSpec{TTL: time.Minute})
		e.clk.advance(time.Minute)
		if err := signUp(e, "carol", late); !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("an expired invite: %v, want 403", err)
		}
		evs, _ := e.st.ListAudit(ctx, store.AuditFilter{Action: "auth.register"})
		withInvite := 0
		for _, ev := range evs {
			if ev.Detail["invite_id"] != nil {
				withInvite++
			}
		}
		if withInvite != 2 {
			t.Errorf("%d registrations record their invite, want 2", withInvite)
		}
	})
	t.Run("rate limit", func(t *testing.T) {
		e := newEnv(t, WithRegistrationLimit(3, time.Hour))
		for i := range 3 {
			if err := signUp(e, fmt.Sprintf("user%d", i), ""); err != nil {
				t.Fatal(err)
			}
		}
		err := signUp(e, "user9", "")
		var le *LimitedError
		if !errors.As(err, &le) || !strings.Contains(err.Error(), "registrations from this address") || le.RetryAfter < 59*time.Minute {
			t.Errorf("4th registration from one address: %v, want limited for about an hour", err)
		}
		if _, err := e.svc.SignUp(ctx, SignUpRequest{Username: "user9", Password: goodPassword, Client: Client{Addr: netip.MustParseAddr("203.0.113.5")}}); err != nil {
			t.Errorf("another address: %v", err)
		}
		evs, _ := e.st.ListAudit(ctx, store.AuditFilter{Action: "auth.register.limited"})
		if len(evs) != 1 {
			t.Errorf("%d auth.register.limited events, want 1", len(evs))
		}
	})
}

func FuzzParseInviteCode(f *testing.F) {
	for _, s := range []string{"inv_" + strings.Repeat("A", 32), "inv_", " inv_abc ", "pdk_" + strings.Repeat("a", 43), "inv_" + strings.Repeat("=", 32)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		code, err := ParseInviteCode(s)
		if err != nil {
			if !errors.Is(err, errdefs.ErrPermissionDenied) {
				t.Fatalf("error outside the taxonomy: %v", err)
			}
			return
		}
		if len(code) != inviteLen || !strings.HasPrefix(code, InvitePrefix) || strings.TrimSpace(s) != code {
			t.Fatalf("accepted %q as %q", s, code)
		}
	})
}
