package server_test

import (
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/browsertest"
	"github.com/paddockhq/paddock/internal/servertest"
)

// A newcomer in a real browser: /register → recovery codes → their live sandbox's app,
// served from inside the sandbox, WebSocket included; then the dev role.
func TestBrowserNewcomer(t *testing.T) {
	e := servertest.Start(t)
	env := map[string]string{"BASE_URL": e.URL}
	if d := os.Getenv("SCREENSHOT_DIR"); d != "" {
		env["SCREENSHOT_DIR"] = d
	}
	out := browsertest.Run(t, "app", env)
	var live, dev string
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "live="); ok {
			live = v
		}
		if v, ok := strings.CutPrefix(line, "dev="); ok {
			dev = v
		}
	}
	// The IDs the pages showed are the user's roles as the API tells them.
	tok := e.Token(t, "newcomer", "correct horse battery staple")
	req, _ := http.NewRequest("GET", e.URL+"/api/v1/roles", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var roles api.Roles
	servertest.Decode(t, resp, http.StatusOK, &roles)
	if roles.Live.ID != live || roles.Dev.ID != dev {
		t.Errorf("the browser saw live=%s dev=%s; the API says live=%s dev=%s", live, dev, roles.Live.ID, roles.Dev.ID)
	}
}
