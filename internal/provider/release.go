package provider

import (
	"slices"
	"strconv"

	"github.com/paddockhq/paddock/internal/api"
)

// Release is how a packaged build of runtime is served once unpacked into dir, given the
// files its archive holds: a Go binary run with PORT; a Node project packaged whole (no
// build output) with `npm start`; anything else (a static site, Vite's dist) by a plain
// file server. None reloads changed files: a release is not edited.
func Release(runtime, dir string, files []string, port int) api.ProviderPreview {
	pv := api.ProviderPreview{Dir: dir, Port: port, Ready: "/"}
	portEnv := "PORT=" + strconv.Itoa(port)
	switch {
	case runtime == "go" && slices.Contains(files, "app"):
		pv.Command, pv.Env = []string{"./app"}, []string{portEnv}
	case runtime == "node" && slices.Contains(files, "package.json") && !slices.Contains(files, "index.html"):
		pv.Command, pv.Env = []string{"npm", "start"}, []string{portEnv}
	default:
		pv.Command = []string{"python3", "-m", "http.server", "--bind", "0.0.0.0", strconv.Itoa(port)}
	}
	return pv
}
