package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
)

// The contract's first lines: without a session or token, the API answers 401 in the
// error shape; pages are HTML; health and metrics answer.
func TestContractUnauthenticated(t *testing.T) {
	e := servertest.Start(t)
	resp, err := http.Get(e.URL + "/api/v1/sandboxes")
	if err != nil {
		t.Fatal(err)
	}
	if got := servertest.ErrorOf(t, resp, http.StatusUnauthorized); got.Code != api.CodeUnauthenticated {
		t.Errorf("code %q", got.Code)
	}
	for _, p := range []string{"/login", "/register", "/recovery"} {
		resp, err := http.Get(e.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(string(body), "<form") {
			t.Errorf("GET %s: %d %s", p, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	resp, err = http.Get(e.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	var h api.Health
	servertest.Decode(t, resp, http.StatusOK, &h)
	if h.Status != "ok" {
		t.Errorf("health %+v", h)
	}
	// An unknown API path and a wrong method are the API's, never a sandbox's.
	resp, _ = http.Get(e.URL + "/api/v1/nope")
	servertest.ErrorOf(t, resp, http.StatusNotFound)
	req, _ := http.NewRequest("PATCH", e.URL+"/api/v1/sandboxes", nil)
	resp, _ = http.DefaultClient.Do(req)
	if got := servertest.ErrorOf(t, resp, http.StatusMethodNotAllowed); got.Code != api.CodeMethodNotAllowed || resp.Header.Get("Allow") != "GET, POST" {
		t.Errorf("405: %+v, Allow %q", got, resp.Header.Get("Allow"))
	}
	// A browser that is not signed in is sent to the login page.
	req, _ = http.NewRequest("GET", e.URL+"/", nil)
	req.Header.Set("Accept", "text/html")
	resp, err = (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil || resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login" {
		t.Errorf("GET / signed out: %v %v", resp.StatusCode, err)
	}
}

// A new user who asks for their app lands on their live sandbox's app: the welcome page, served from inside the
// sandbox, through the proxy, with the role and sandbox in the headers.
func TestRegisterLandsOnLiveSandbox(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	alice.Start()
	resp := alice.App("GET", "/", nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /: %d %s", resp.StatusCode, body)
	}
	var roles api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, 200, &roles)
	if resp.Header.Get(api.HeaderRole) != "live" || resp.Header.Get(api.HeaderSandbox) != roles.Live.ID {
		t.Errorf("headers role=%q sandbox=%q, want live %s", resp.Header.Get(api.HeaderRole), resp.Header.Get(api.HeaderSandbox), roles.Live.ID)
	}
	if !strings.Contains(string(body), roles.Live.ID) {
		t.Errorf("the page does not name the live sandbox %s:\n%s", roles.Live.ID, body)
	}
	if roles.Live.State != "running" || roles.Dev.State != "running" || roles.Live.ID == roles.Dev.ID {
		t.Errorf("roles %+v", roles)
	}
}
