package server_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/client"
	"github.com/paddockhq/paddock/internal/servertest"
)

// providerStep runs a provider step through the API and returns its events, the result
// last.
func providerStep(t *testing.T, c *servertest.Client, id, step string, req api.ProviderRequest) []api.ProviderEvent {
	t.Helper()
	resp := c.DoToken("POST", "/api/v1/sandboxes/"+id+"/app/"+step, req)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%s %+v: %d %s, want a 200 event stream", step, req, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var evs []api.ProviderEvent
	if err := client.ReadProviderEvents(resp.Body, func(ev api.ProviderEvent) { evs = append(evs, ev) }); err != nil {
		t.Fatalf("%s: reading its events: %v", step, err)
	}
	if len(evs) == 0 || evs[len(evs)-1].Type != api.EventResult {
		t.Fatalf("%s: events %+v, want a result last", step, evs)
	}
	return evs
}

func result(evs []api.ProviderEvent) api.ProviderEvent { return evs[len(evs)-1] }

// ran lists the commands a step started, as "step: command".
func ran(evs []api.ProviderEvent) []string {
	var out []string
	for _, ev := range evs {
		if ev.Type == api.EventProgress && ev.State == "running" {
			out = append(out, ev.Step+": "+ev.Command)
		}
	}
	return out
}

func logged(evs []api.ProviderEvent, s string) bool {
	return slices.ContainsFunc(evs, func(ev api.ProviderEvent) bool { return ev.Type == api.EventLog && strings.Contains(ev.Line, s) })
}

func execOK(t *testing.T, c *servertest.Client, id string, argv ...string) string {
	t.Helper()
	var res api.ExecResult
	servertest.Decode(t, c.DoToken("POST", "/api/v1/sandboxes/"+id+"/exec", api.ExecRequest{Argv: argv}), http.StatusOK, &res)
	if res.ExitCode != 0 {
		t.Fatalf("%q: exit %d: %s%s", argv, res.ExitCode, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}

// A project's steps run in its sandbox with their commands and output streamed; a
// workspace no provider recognises, an unknown runtime, a path out of the workspace and a
// second scaffold into one project are refused before anything runs, saying what was
// wrong.
func TestProviderStatic(t *testing.T) {
	e := servertest.Start(t)
	alice, bob := e.Register(t, "alice"), e.Register(t, "bob")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "p"}), http.StatusCreated, &sb)
	path := "/api/v1/sandboxes/" + sb.ID + "/app/"

	none := servertest.ErrorOf(t, alice.DoToken("POST", path+"build", api.ProviderRequest{}), http.StatusConflict)
	for _, want := range []string{"package.json (node)", "go.mod (go)", "index.html (static)"} {
		if !strings.Contains(none.Message, want) {
			t.Errorf("build of an empty workspace: %q, want it to list %q", none.Message, want)
		}
	}
	for _, c := range []struct {
		step string
		req  api.ProviderRequest
		want string
	}{
		{"new", api.ProviderRequest{Runtime: "cobol", Name: "x"}, "want one of node, go, static"},
		{"new", api.ProviderRequest{Name: "x"}, "runtime"},
		{"new", api.ProviderRequest{Runtime: "static", Name: "Bad Name"}, "name"},
		{"build", api.ProviderRequest{Dir: "../other"}, "inside the workspace"},
		{"deploy", api.ProviderRequest{}, "want new, build"},
	} {
		msg := servertest.ErrorOf(t, alice.DoToken("POST", path+c.step, c.req), http.StatusBadRequest).Message
		if !strings.Contains(msg, c.want) {
			t.Errorf("%s %+v: %q, want it to say %q", c.step, c.req, msg, c.want)
		}
	}
	servertest.ErrorOf(t, bob.DoToken("POST", path+"build", api.ProviderRequest{}), http.StatusNotFound)

	site := api.ProviderRequest{Dir: "site"}
	evs := providerStep(t, alice, sb.ID, "new", api.ProviderRequest{Runtime: "static", Name: "my-site", Dir: "site"})
	if r := result(evs); r.Error != "" || r.Runtime != "static" || r.Dir != "site" {
		t.Fatalf("new static: result %+v", r)
	}
	if got := ran(evs); !slices.Equal(got, []string{"scaffold: write index.html", "scaffold: write style.css"}) {
		t.Errorf("new static ran %q", got)
	}
	if page := execOK(t, alice, sb.ID, "cat", "site/index.html"); !strings.Contains(page, "<h1>my-site</h1>") {
		t.Errorf("scaffolded index.html: %q", page)
	}
	again := servertest.ErrorOf(t, alice.DoToken("POST", path+"new", api.ProviderRequest{Runtime: "static", Dir: "site"}), http.StatusConflict)
	if !strings.Contains(again.Message, "holds a static project already") {
		t.Errorf("a second new into site: %q", again.Message)
	}

	if evs := providerStep(t, alice, sb.ID, "build", site); result(evs).Error != "" || !logged(evs, "nothing to build for a static project") {
		t.Errorf("build static: %+v", evs)
	}
	evs = providerStep(t, alice, sb.ID, "package", site)
	if r := result(evs); r.Error != "" || r.Artifact != "site/.paddock/package/static.tar.gz" {
		t.Fatalf("package static: %+v", evs)
	}
	if list := execOK(t, alice, sb.ID, "tar", "-tzf", "site/.paddock/package/static.tar.gz"); !strings.Contains(list, "./index.html") || strings.Contains(list, ".paddock") {
		t.Errorf("the static package holds %q, want index.html and not its own .paddock", list)
	}
	pv := result(providerStep(t, alice, sb.ID, "preview", site)).Preview
	if pv == nil || pv.Port != 8080 || !pv.HotReload || pv.Dir != "site" {
		t.Errorf("preview static: %+v", pv)
	}
	if r := result(providerStep(t, alice, sb.ID, "clean", site)); r.Error != "" {
		t.Errorf("clean: %+v", r)
	}
	if ls := execOK(t, alice, sb.ID, "ls", "-A", "site"); strings.Contains(ls, ".paddock") {
		t.Errorf("after clean, site holds %q", ls)
	}
}
