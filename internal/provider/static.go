package provider

import (
	"context"
	"path"
	"strconv"

	"github.com/paddockhq/paddock/internal/api"
)

// Static is a site of HTML, CSS and JavaScript files: nothing to fetch or build, served as
// it is.
type Static struct{}

var _ RuntimeProvider = Static{}

func (Static) ID() string        { return "static" }
func (Static) Markers() []string { return []string{"index.html"} }

func (s Static) Detect(ctx context.Context, ws Workspace, dir string) (Project, bool, error) {
	ok, err := exists(ctx, ws, path.Join(dir, "index.html"))
	return Project{Runtime: s.ID(), Dir: dir}, ok, err
}

func (Static) Scaffold(name string) (map[string][]byte, error) {
	return map[string][]byte{
		"index.html": []byte(`<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>` + name + `</title>
  <link rel="stylesheet" href="style.css">
</head>
<body>
  <h1>` + name + `</h1>
  <p>Edit index.html and style.css; reload to see them.</p>
</body>
</html>
`),
		"style.css": []byte(`:root { --accent: #2563eb; }
body { font-family: system-ui, sans-serif; margin: 3rem auto; max-width: 40rem; }
h1 { color: var(--accent); }
`),
	}, nil
}

func (Static) Resolve(Project) []Command  { return nil }
func (Static) Build(Project) []Command    { return nil }
func (Static) Validate(Project) []Command { return nil }

// Package archives the directory itself.
func (Static) Package(Project) ([]Command, string) { return nil, "." }

// Preview serves the directory; each request reads the files, so a change needs no
// restart.
func (Static) Preview(p Project, port int) api.ProviderPreview {
	return api.ProviderPreview{
		Command: []string{"python3", "-m", "http.server", "--bind", "0.0.0.0", strconv.Itoa(port)},
		Dir:     p.Dir, Port: port, Ready: "/", HotReload: true,
	}
}

func (Static) Cleanup(Project) []string { return []string{".paddock"} }

// Registries is none: a static site fetches nothing.
func (Static) Registries(context.Context, Workspace, Project, []string) ([]string, error) {
	return nil, nil
}
