package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/origins"
	"github.com/paddockhq/paddock/internal/servertest"
)

// A new account's browser landing on / is offered its app on /start rather than given
// a sandbox; the button there makes and starts them, and from then on / is the live
// desktop and any other path the live app.
func TestIdleAccountsGetNoSandbox(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	noRedirect := &http.Client{Jar: alice.HTTP.Jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	page := func(path string) *http.Response {
		req, _ := http.NewRequest("GET", e.URL+path, nil)
		req.Header.Set("Accept", "text/html,application/xhtml+xml")
		req.Header.Set("Sec-Fetch-Mode", "navigate")
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := page("/")
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/start" {
		t.Fatalf("a new account's first page: %d to %q, want 303 to /start", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp = page("/start")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `action="/auth/start"`) {
		t.Fatalf("/start: %d\n%s", resp.StatusCode, body)
	}
	// The browser's own requests for the app (its favicon) do not make one either.
	servertest.ErrorOf(t, alice.Do("GET", "/favicon.ico", nil), http.StatusConflict)
	if n := e.Server.Fleet().Running(); n != 0 {
		t.Errorf("%d sandboxes running for an account that did nothing", n)
	}
	var list api.SandboxList
	alice.MustJSON("GET", "/api/v1/sandboxes", nil, http.StatusOK, &list)
	if len(list.Sandboxes) != 0 {
		t.Errorf("sandboxes made for an account that did nothing: %+v", list.Sandboxes)
	}
	servertest.Decode(t, alice.Do("POST", "/auth/start", nil), http.StatusNoContent, nil)
	var roles api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
	desk := e.AppsURL(origins.Host{Kind: origins.KindDesktop, ID: roles.Live.ID}) + "/"
	resp = page("/")
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != origins.HandoffPath(desk) {
		t.Errorf("after /auth/start: / is %d to %q, want 303 to the handoff to the live desktop %s", resp.StatusCode, resp.Header.Get("Location"), desk)
	}
	// Any other path still goes to the app, on the live apps host.
	resp = page("/some/page?q=1")
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != alice.AppURL("live")+"/some/page?q=1" {
		t.Errorf("after /auth/start: /some/page is %d to %q, want 303 to the live apps host", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp = alice.App("GET", "/", nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get(api.HeaderRole) != "live" {
		t.Errorf("after /auth/start: %d role %q, want the live app", resp.StatusCode, resp.Header.Get(api.HeaderRole))
	}
}
