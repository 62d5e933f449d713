package web

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/auth"
	"github.com/paddockhq/paddock/internal/store"
)

func TestRegistrationModes(t *testing.T) {
	t.Run("closed", func(t *testing.T) {
		e := newEnv(t, false, auth.WithRegistration(auth.RegistrationClosed))
		c := e.client(t)
		page := c.want(c.get("/register"), http.StatusOK).body
		if strings.Contains(page, `action="/auth/register"`) || !strings.Contains(page, "Registration is closed") {
			t.Errorf("closed /register page:\n%s", page)
		}
		got := c.apiError(c.json("/auth/register", api.RegisterRequest{Username: "alice", Password: goodPassword}), http.StatusForbidden, api.CodePermissionDenied)
		if !strings.Contains(got.Message, "registration: closed") {
			t.Errorf("message %q does not name the mode", got.Message)
		}
		r := c.form("/auth/register", url.Values{"username": {"alice"}, "password": {goodPassword}})
		if r.StatusCode != http.StatusForbidden || !strings.Contains(r.body, "registration: closed") {
			t.Errorf("form post: %d\n%.400s", r.StatusCode, r.body)
		}
	})
	t.Run("invite", func(t *testing.T) {
		e := newEnv(t, false, auth.WithRegistration(auth.RegistrationInvite))
		ctx := context.Background()
		root, err := e.auth.Register(ctx, auth.RegisterRequest{Username: "root", Password: goodPassword, Role: store.RoleAdmin})
		if err != nil {
			t.Fatal(err)
		}
		code, _, err := e.auth.CreateInvite(ctx, root.User, auth.InviteSpec{})
		if err != nil {
			t.Fatal(err)
		}
		c := e.client(t)
		if page := c.want(c.get("/register"), http.StatusOK).body; !strings.Contains(page, `name="invite"`) {
			t.Errorf("invite-mode page has no invite field:\n%s", page)
		}
		got := c.apiError(c.json("/auth/register", api.RegisterRequest{Username: "alice", Password: goodPassword}), http.StatusForbidden, api.CodePermissionDenied)
		if !strings.Contains(got.Message, "registration: invite") {
			t.Errorf("message %q does not name the mode", got.Message)
		}
		c.want(c.form("/auth/register", url.Values{"username": {"alice"}, "password": {goodPassword}, "invite": {code}}), http.StatusOK)
		c2 := e.client(t)
		c2.apiError(c2.json("/auth/register", api.RegisterRequest{Username: "bob", Password: goodPassword, Invite: code}), http.StatusForbidden, api.CodePermissionDenied)
	})
	t.Run("rate limited", func(t *testing.T) {
		e := newEnv(t, false, auth.WithRegistrationLimit(2, time.Hour))
		c := e.client(t)
		for _, name := range []string{"alice", "bob"} {
			c.want(c.json("/auth/register", api.RegisterRequest{Username: name, Password: goodPassword}), http.StatusCreated)
		}
		r := c.json("/auth/register", api.RegisterRequest{Username: "carol", Password: goodPassword})
		got := c.apiError(r, http.StatusTooManyRequests, api.CodeLimitExceeded)
		if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 3000 || !strings.Contains(got.Message, "registrations from this address") {
			t.Errorf("429 %q with Retry-After %q", got.Message, r.Header.Get("Retry-After"))
		}
	})
	t.Run("breached password", func(t *testing.T) {
		e := newEnv(t, false)
		c := e.client(t)
		for pw, rule := range map[string]string{"aaaaaaaaaaaa": "repeats", "qwertyuiop123": "common and breached", "123456789012": "sequence"} {
			got := c.apiError(c.json("/auth/register", api.RegisterRequest{Username: "alice", Password: pw}), http.StatusBadRequest, api.CodeInvalidArgument)
			if !strings.Contains(got.Message, rule) {
				t.Errorf("%s: %q, want the rule %q named", pw, got.Message, rule)
			}
		}
	})
}
