package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/browsertest"
	"github.com/paddockhq/paddock/internal/origins"
	"github.com/paddockhq/paddock/internal/servertest"
)

// GET /api/v1/users lists every account for an admin (a token needs scope admin); a
// plain user is refused.
func TestListUsers(t *testing.T) {
	e := servertest.Start(t)
	_, pw, err := e.Server.FirstAdmin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	alice := e.Register(t, "alice")
	admin := e.Token(t, "admin", pw)
	var list api.UserList
	servertest.Decode(t, bearer(t, e, admin, "GET", "/api/v1/users", nil), http.StatusOK, &list)
	var names []string
	for _, u := range list.Users {
		names = append(names, u.Username+"/"+u.Role)
		if u.ID == "" || u.CreatedAt.IsZero() {
			t.Errorf("user %+v lacks an ID or creation time", u)
		}
	}
	if got := strings.Join(names, " "); got != "admin/admin alice/user" {
		t.Errorf("users %q, want admin/admin alice/user, oldest first", got)
	}
	servertest.ErrorOf(t, alice.Do("GET", "/api/v1/users", nil), http.StatusForbidden)
	var narrow api.Token
	servertest.Decode(t, bearer(t, e, admin, "POST", "/api/v1/tokens", api.CreateTokenRequest{Name: "ro", Scopes: []string{"read"}}), http.StatusCreated, &narrow)
	servertest.ErrorOf(t, bearer(t, e, narrow.Secret, "GET", "/api/v1/users", nil), http.StatusForbidden)
}

// GET /api/v1/events?before=ID pages back through the caller's events, newest first,
// without gaps or repeats; a bad cursor is a 400 naming it.
func TestEventsPaging(t *testing.T) {
	e := servertest.Start(t)
	c := e.Register(t, "pager")
	for i := range 7 {
		servertest.Decode(t, c.Do("PUT", fmt.Sprintf("/api/v1/me/secrets/s%d", i), api.PutSecretRequest{Value: "v"}), http.StatusOK, nil)
	}
	var all api.EventList
	c.MustJSON("GET", "/api/v1/events?limit=1000", nil, http.StatusOK, &all)
	var paged []int64
	before := ""
	for range 100 {
		var page api.EventList
		c.MustJSON("GET", "/api/v1/events?limit=3"+before, nil, http.StatusOK, &page)
		for _, ev := range page.Events {
			paged = append(paged, ev.ID)
		}
		if len(page.Events) < 3 {
			break
		}
		before = fmt.Sprintf("&before=%d", page.Events[len(page.Events)-1].ID)
	}
	if len(paged) != len(all.Events) || len(all.Events) < 7 {
		t.Fatalf("paged %d events, listed %d at once", len(paged), len(all.Events))
	}
	for i, ev := range all.Events {
		if paged[i] != ev.ID {
			t.Fatalf("page order %v differs from %v", paged, all.Events)
		}
	}
	got := servertest.ErrorOf(t, c.Do("GET", "/api/v1/events?before=soon", nil), http.StatusBadRequest)
	if !strings.Contains(got.Message, "before") {
		t.Errorf("message %q does not name before", got.Message)
	}
}

// The console's desktop link for a sandbox is the handoff to its desktop-<id> host; an
// ID that is none is 404, never a redirect.
func TestConsoleDesktopLink(t *testing.T) {
	e := servertest.Start(t)
	c := e.Register(t, "desk")
	noFollow := *c.HTTP
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := noFollow.Get(e.URL + "/console/desktop/sb-abcdefghij")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := origins.HandoffPath(e.AppsURL(origins.Host{Kind: origins.KindDesktop, ID: "sb-abcdefghij"}))
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != want {
		t.Errorf("desktop link: %d to %q, want 303 to %q", resp.StatusCode, resp.Header.Get("Location"), want)
	}
	servertest.ErrorOf(t, c.Do("GET", "/console/desktop/"+url.PathEscape("../../etc"), nil), http.StatusNotFound)
	servertest.ErrorOf(t, c.Do("GET", "/console/desktop/sb-UPPER", nil), http.StatusNotFound)
}

// The console in a real browser: tests/browser/console.mjs drives every section (sandboxes,
// roles, secrets, tokens, account, events, admin) with bad input first, and saves a
// screenshot of each. What the pages did is then checked through the API.
func TestBrowserConsole(t *testing.T) {
	e := servertest.Start(t)
	_, adminPW, err := e.Server.FirstAdmin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c := e.Register(t, "carla")
	c.Start()
	shots := os.Getenv("SCREENSHOT_DIR")
	if shots == "" {
		shots = t.TempDir()
	}
	out := browsertest.RunFor(t, "console", map[string]string{
		"BASE_URL": e.URL, "USERNAME": "carla", "PASSWORD": "correct horse battery carla",
		"ADMIN_USERNAME": "admin", "ADMIN_PASSWORD": adminPW, "SCREENSHOT_DIR": shots,
	}, 6*time.Minute)
	t.Log(out)
	seen := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.Contains(k, " ") {
			seen[k] = v
		}
	}
	// The password the console set is the account's now; the promotion happened.
	tok := e.Token(t, "carla", "a console chosen passphrase")
	var roles api.Roles
	servertest.Decode(t, bearer(t, e, tok, "GET", "/api/v1/roles", nil), http.StatusOK, &roles)
	if roles.Live.ID != seen["promoted_live"] || roles.Dev.ID != seen["live"] {
		t.Errorf("roles live=%s dev=%s; the console promoted %s over %s", roles.Live.ID, roles.Dev.ID, seen["promoted_live"], seen["live"])
	}
	var secrets api.SecretList
	servertest.Decode(t, bearer(t, e, tok, "GET", "/api/v1/me/secrets", nil), http.StatusOK, &secrets)
	if len(secrets.Secrets) != 1 || secrets.Secrets[0].Name != "db-url" {
		t.Errorf("secrets %+v, want db-url alone", secrets.Secrets)
	}
	// No secret value or password typed into the console reached the log or an event.
	var evs api.EventList
	servertest.Decode(t, bearer(t, e, tok, "GET", "/api/v1/events?limit=1000", nil), http.StatusOK, &evs)
	dump, _ := json.Marshal(evs)
	logs := e.Logs.String()
	for _, s := range []string{"value-typed-into-the-console-42", "postgres://example", "a console chosen passphrase"} {
		if strings.Contains(logs, s) {
			t.Errorf("the server log holds %q", s)
		}
		if strings.Contains(string(dump), s) {
			t.Errorf("an event holds %q", s)
		}
	}
}
