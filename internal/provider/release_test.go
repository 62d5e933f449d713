package provider

import (
	"slices"
	"testing"
)

// A release runs a Go binary with PORT, a Node project packaged whole with npm start, and
// serves anything else (a static site, Vite's dist) as files; none reloads by itself.
func TestRelease(t *testing.T) {
	for _, c := range []struct {
		runtime string
		files   []string
		want    string
	}{
		{"go", []string{"app"}, "./app"},
		{"node", []string{"package.json", "server.js"}, "npm"},
		{"node", []string{"assets/x.js", "index.html"}, "python3"},
		{"static", []string{"index.html"}, "python3"},
	} {
		pv := Release(c.runtime, ".paddock/release/x", c.files, 8080)
		if pv.Command[0] != c.want || pv.Dir != ".paddock/release/x" || pv.HotReload || pv.Port != 8080 {
			t.Errorf("Release(%s, %q): %+v, want %s", c.runtime, c.files, pv, c.want)
		}
		if c.want != "python3" && !slices.Contains(pv.Env, "PORT=8080") {
			t.Errorf("Release(%s): env %q, want PORT", c.runtime, pv.Env)
		}
	}
}
