package coder_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/agent/coder"
	"github.com/paddockhq/paddock/internal/gateway/scripted"
	"github.com/paddockhq/paddock/internal/wire"
)

// needChromium fails, rather than skips, where the browser tool cannot run: make setup
// installs chromium, and a machine without it must not pass these tests by accident.
func needChromium(t *testing.T) {
	t.Helper()
	if why := coder.BrowserUnavailable(); why != "" {
		t.Fatalf("the browser tool cannot run here: %s (make setup installs chromium)", why)
	}
}

// A turn drives the browser tool over an app: it opens the page and reads its text,
// types and clicks, reads what the click changed and the console, and takes a
// screenshot, every answer reaching the model.
func TestBrowserTool(t *testing.T) {
	needChromium(t)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>The app</title><h1>Hello from the app</h1>
<input id="name"><button id="greet" onclick="document.getElementById('out').textContent = 'Hi, ' + document.getElementById('name').value; console.log('greeted', document.getElementById('name').value)">Greet</button>
<p id="out"></p><script>console.warn('page loaded')</script>`)
	}))
	defer app.Close()
	call := func(args string) string {
		return fmt.Sprintf(`{"tool_calls": [{"name": "browser", "arguments": %s}]}`, args)
	}
	sc, err := scripted.Parse(fmt.Appendf(nil, `{"steps": [
	  {"expect": {"last_contains": ["look at the app"], "tools": ["browser"]}, "respond": %s},
	  {"expect": {"last_role": "tool", "last_contains": ["title: The app", "Hello from the app"]}, "respond": %s},
	  {"expect": {"last_role": "tool", "last_contains": ["typed 3 characters into #name"]}, "respond": %s},
	  {"expect": {"last_role": "tool", "last_contains": ["clicked #greet"]}, "respond": %s},
	  {"expect": {"last_role": "tool", "last_contains": ["Hi, Ada"]}, "respond": %s},
	  {"expect": {"last_role": "tool", "last_contains": ["console.warning: page loaded", "console.log: greeted Ada"]}, "respond": %s},
	  {"expect": {"last_role": "tool", "last_contains": ["saved a screenshot of"]}, "respond": {"content": "The app greets."}}
	]}`, call(`{"action": "open", "url": "`+app.URL+`/"}`), call(`{"action": "type", "selector": "#name", "text": "Ada"}`),
		call(`{"action": "click", "selector": "#greet"}`), call(`{"action": "text", "selector": "#out"}`),
		call(`{"action": "console"}`), call(`{"action": "screenshot"}`)))
	if err != nil {
		t.Fatal(err)
	}
	s := newSessionFrom(t, coder.APIOpenAI, sc, nil, nil)
	if _, err := s.run("look at the app", nil); err != nil {
		t.Fatalf("%v; script: %v", err, s.provider.Err())
	}
	s.scriptDone()
	shot, _ := s.last(coder.EvToolResult)
	path := strings.TrimSpace(shot.Output[strings.LastIndex(shot.Output, " to ")+4:])
	if b, err := os.ReadFile(path); err != nil || !strings.HasPrefix(string(b), "\x89PNG") {
		t.Errorf("the screenshot %s: %v", path, err)
	}
}

// Where the browser cannot run, the tool says why and the turn goes on; a URL that is
// not http is refused, naming it.
func TestBrowserToolUnavailable(t *testing.T) {
	sc, err := scripted.Parse([]byte(`{"steps": [
	  {"expect": {"last_contains": ["look"]}, "respond": {"tool_calls": [{"name": "browser", "arguments": {"action": "open", "url": "http://127.0.0.1:1/"}}]}},
	  {"expect": {"last_role": "tool", "last_contains": ["unavailable in the process tier", "no network namespace"]}, "respond": {"content": "No browser here."}}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(wire.TierEnv, string(wire.TierProcess))
	s := newSessionFrom(t, coder.APIOpenAI, sc, nil, nil)
	if _, err := s.run("look", nil); err != nil {
		t.Fatal(err)
	}
	s.scriptDone()

	t.Setenv(wire.TierEnv, string(wire.TierContainer))
	t.Setenv("PATH", t.TempDir())
	defer coder.SetChromiumBinaries(coder.SetChromiumBinaries(nil))
	if why := coder.BrowserUnavailable(); !strings.Contains(why, "no Chromium in this sandbox") {
		t.Errorf("without chromium: %q", why)
	}
}
