package origins

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

const (
	user  = "0123456789abcdef0123456789abcdef"
	other = "fedcba9876543210fedcba9876543210"
	sb    = "sb-abcdefgh23"
)

func mustNew(t *testing.T, c Config) *Origins {
	t.Helper()
	o, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// The apps domain is checked at start, with the field named: a DNS name, not the control
// plane's host nor a parent of it, nor the same site.
func TestConfigChecks(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want string // "" when it is accepted
	}{
		{Config{}, ""},
		{Config{AppsDomain: "apps.example-apps.net", PublicURL: "https://paddock.example.com"}, ""},
		{Config{AppsDomain: "localhost", PublicURL: "http://10.0.0.5:8080"}, ""},
		{Config{AppsDomain: "apps.example.com", PublicURL: "https://paddock.example.com"}, "apps_domain \"apps.example.com\" and the control plane's host \"paddock.example.com\" (public_url) are the same site"},
		{Config{AppsDomain: "example.com", PublicURL: "https://paddock.example.com"}, "is inside it"},
		{Config{AppsDomain: "localhost", PublicURL: "http://localhost:8080"}, "is inside it"},
		{Config{AppsDomain: "localhost", PublicURL: "http://paddock.localhost:8080"}, "is inside it"},
		{Config{AppsDomain: "127.0.0.1"}, "apps_domain: \"127.0.0.1\": want a DNS name"},
		{Config{AppsDomain: "apps_x.example.net"}, "apps_domain: "},
		{Config{AppsDomain: "http://apps.example.net"}, "apps_domain: "},
		{Config{AppsDomain: "apps..net"}, "apps_domain: "},
		{Config{PublicURL: "paddock.example.com"}, "public_url: "},
		{Config{PublicURL: "https://paddock.example.com/base"}, "public_url: "},
	} {
		_, err := New(tc.c)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.c, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, errdefs.ErrInvalidArgument)):
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
	}
}

func TestLookup(t *testing.T) {
	o := mustNew(t, Config{})
	for _, tc := range []struct {
		host  string
		where Where
		h     Host
	}{
		{"127.0.0.1:8080", Control, Host{}},
		{"paddock.example.com", Control, Host{}},
		{"localhost:8080", AppsParent, Host{}},
		{"app-" + sb + ".localhost:8080", Apps, Host{KindApp, sb}},
		{"APP-" + strings.ToUpper(sb) + ".LOCALHOST.:8080", Apps, Host{KindApp, sb}},
		{"desktop-" + sb + ".localhost", Apps, Host{KindDesktop, sb}},
		{"live-" + user + ".localhost:1", Apps, Host{KindLive, user}},
		{"dev-" + user + ".localhost", Apps, Host{KindDev, user}},
		{"live-" + user + ".x.localhost", AppsParent, Host{}},
		{"app-sb-short.localhost", AppsParent, Host{}},
		{"live-nothex.localhost", AppsParent, Host{}},
		{"evil.localhost", AppsParent, Host{}},
		{"localhost.evil", Control, Host{}},
	} {
		where, h, _ := o.Lookup(tc.host)
		if where != tc.where || h != tc.h {
			t.Errorf("Lookup(%q) = %v %+v, want %v %+v", tc.host, where, h, tc.where, tc.h)
		}
	}
}

// Only apps hosts, on the scheme and port apps are served on, are handoff targets: no
// open redirect.
func TestTarget(t *testing.T) {
	local := mustNew(t, Config{})
	live := "http://live-" + user + ".localhost:8080"
	for _, tc := range []struct {
		to string
		ok bool
	}{
		{live + "/", true},
		{live + "/x?y=1#frag", true},
		{"http://app-" + sb + ".localhost:8080", true},
		{"http://127.0.0.1:8080/", false},
		{"http://localhost:8080/", false},
		{"https://live-" + user + ".localhost:8080/", false},
		{"http://live-" + user + ".localhost:9090/", false},
		{"http://live-" + user + ".localhost/", false},
		{"http://evil.example/", false},
		{"//evil.example/", false},
		{"/relative", false},
		{"http://live-" + user + ".localhost.evil.example:8080/", false},
		{"http://x@live-" + user + ".localhost:8080/", false},
		{"javascript:alert(1)", false},
		{"", false},
	} {
		_, u, err := local.Target(tc.to, "127.0.0.1:8080")
		if (err == nil) != tc.ok {
			t.Errorf("Target(%q) = %v, %v; want ok=%v", tc.to, u, err, tc.ok)
		}
	}
	dep := mustNew(t, Config{AppsDomain: "apps.example-apps.net", PublicURL: "https://paddock.example.com"})
	if _, _, err := dep.Target("https://dev-"+user+".apps.example-apps.net/", "paddock.example.com"); err != nil {
		t.Error(err)
	}
	if _, _, err := dep.Target("https://dev-"+user+".apps.example-apps.net:8443/", "paddock.example.com"); err == nil {
		t.Error("another port accepted")
	}
	if got := dep.URL(Host{KindLive, user}, "whatever:1"); got != "https://live-"+user+".apps.example-apps.net" {
		t.Errorf("URL = %s", got)
	}
	if got := local.ControlURL("app-" + sb + ".localhost:8080"); got != "http://127.0.0.1:8080" {
		t.Errorf("ControlURL = %s", got)
	}
}

// FuzzTarget: whatever "to" a request carries, an accepted one is an apps host of this
// server's scheme and port, so the handoff never redirects anywhere else.
func FuzzTarget(f *testing.F) {
	for _, s := range []string{"http://live-" + user + ".localhost:8080/", "http://evil.example/", "//x", "http://a@b",
		"http://live-" + user + ".localhost:8080\\@evil.example/", "http://live-" + user + ".localhost%2eevil.example:8080/"} {
		f.Add(s)
	}
	o, err := New(Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, to string) {
		h, u, err := o.Target(to, "127.0.0.1:8080")
		if err != nil {
			return
		}
		again, err := url.Parse(u.String())
		if err != nil || again.Scheme != "http" || again.Port() != "8080" || again.User != nil ||
			strings.ToLower(again.Hostname()) != h.Label()+".localhost" {
			t.Fatalf("Target(%q) accepted %q (%+v)", to, u, h)
		}
	})
}

// FuzzLookup: a Host header is an apps host only when it is exactly one valid label under
// the apps domain.
func FuzzLookup(f *testing.F) {
	for _, s := range []string{"live-" + user + ".localhost:8080", "localhost", "a.b.localhost", "127.0.0.1", "[::1]:80"} {
		f.Add(s)
	}
	o, err := New(Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, host string) {
		where, h, _ := o.Lookup(host)
		if where != Apps {
			return
		}
		lower := strings.ToLower(host)
		if !strings.HasPrefix(lower, h.Label()+".localhost") {
			t.Fatalf("Lookup(%q) = %+v", host, h)
		}
		if _, err := ParseLabel(h.Label()); err != nil {
			t.Fatalf("Lookup(%q) gave an invalid label %q", host, h.Label())
		}
	})
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// A code is single-use, expires after CodeTTL, and works on its own host only; a cookie
// is valid on its own host only, whichever of several cookies carries it.
func TestHandoffs(t *testing.T) {
	c := &clock{time.Unix(1e9, 0)}
	hs := NewHandoffs(c.now)
	hostA, hostB := "app-"+sb+".localhost:8080", "live-"+user+".localhost:8080"
	g := Grant{Host: hostA, UserID: user, Session: "s"}

	code, _ := hs.Mint(g)
	if _, err := hs.Redeem(code, hostA); err != nil {
		t.Fatal(err)
	}
	if _, err := hs.Redeem(code, hostA); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("second use: %v", err)
	}
	code, _ = hs.Mint(g)
	if _, err := hs.Redeem(code, hostB); err == nil {
		t.Error("a code for A was redeemed on B")
	}
	if _, err := hs.Redeem(code, hostA); err == nil {
		t.Error("a code tried on the wrong host is still usable")
	}
	code, _ = hs.Mint(g)
	c.t = c.t.Add(CodeTTL)
	if _, err := hs.Redeem(code, hostA); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("expired code: %v", err)
	}

	g.Expires = c.t.Add(time.Hour)
	a := hs.Open(g)
	gb := g
	gb.Host = hostB
	b := hs.Open(gb)
	if _, _, ok := hs.Cookie([]string{a}, hostB); ok {
		t.Error("A's cookie is valid on B (cookie tossing)")
	}
	if got, v, ok := hs.Cookie([]string{a, "junk", b}, hostB); !ok || v != b || got.Host != hostB {
		t.Errorf("B's own cookie among tossed ones: %v %q", ok, v)
	}
	hs.Revoke(b)
	if _, _, ok := hs.Cookie([]string{b}, hostB); ok {
		t.Error("revoked cookie still valid")
	}
	c.t = c.t.Add(time.Hour)
	if _, _, ok := hs.Cookie([]string{a}, hostA); ok {
		t.Error("expired cookie still valid")
	}
}

// A user cannot pile up codes without bound.
func TestHandoffCodesBounded(t *testing.T) {
	hs := NewHandoffs(nil)
	var err error
	for range maxCodesPerUser + 1 {
		if _, err = hs.Mint(Grant{Host: "h", UserID: user}); err != nil {
			break
		}
	}
	if !errors.Is(err, errdefs.ErrLimitExceeded) {
		t.Errorf("after %d codes: %v", maxCodesPerUser+1, err)
	}
	if _, err := hs.Mint(Grant{Host: "h", UserID: other}); err != nil {
		t.Errorf("another user: %v", err)
	}
}
