package server_test

import (
	"archive/zip"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/testenv"
)

// goProxyDir writes a GOPROXY directory holding one module, example.test/greet v1.0.0.
func goProxyDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	v := filepath.Join(dir, "example.test", "greet", "@v")
	if err := os.MkdirAll(v, 0o755); err != nil {
		t.Fatal(err)
	}
	mod := "module example.test/greet\n\ngo 1.22\n"
	files := map[string]string{
		"list": "v1.0.0\n", "v1.0.0.info": `{"Version":"v1.0.0","Time":"2026-01-01T00:00:00Z"}`, "v1.0.0.mod": mod,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(v, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Create(filepath.Join(v, "v1.0.0.zip"))
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	for name, body := range map[string]string{"go.mod": mod, "greet.go": "package greet\n\nfunc Hello() string { return \"hello from a module\" }\n"} {
		w, err := zw.Create("example.test/greet@v1.0.0/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// goProject is a module that needs example.test/greet, with its go.sum.
const goProject = `mkdir svc && cd svc && cat > go.mod <<'EOF'
module svc

go 1.22

require example.test/greet v1.0.0
EOF
cat > go.sum <<'EOF'
example.test/greet v1.0.0 h1:oyeQLcTSywTDSHFln9+RU4Psj4i8if+cNRLag6shv78=
example.test/greet v1.0.0/go.mod h1:EWG0AHBGQk0RA9eyeO3l2OKXETB9jtztKOAvPCj9JIM=
EOF
cat > main.go <<'EOF'
package main

import (
	"fmt"

	"example.test/greet"
)

func main() { fmt.Println(greet.Hello()) }
EOF`

// A Go module's dependencies come from a module proxy (a GOPROXY directory served over
// HTTP on loopback) through the egress allowlist; a proxy on a host the policy does not
// allow fails the step with Go's own message naming the host and the rule.
func TestProviderGoModuleProxy(t *testing.T) {
	testenv.RequireRoot(t)
	proxy := httptest.NewServer(http.FileServer(http.Dir(goProxyDir(t))))
	t.Cleanup(proxy.Close)
	e, port := startBehindEgress(t, proxy, "goproxy.test")
	alice, bob := e.Register(t, "alice"), e.Register(t, "bob")
	sandbox := func(c *servertest.Client, host string) string {
		var sb api.Sandbox
		servertest.Decode(t, c.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: strings.Split(host, ".")[0],
			Env: []string{fmt.Sprintf("GOPROXY=http://%s:%d", host, port), "GONOSUMDB=example.test"}}), http.StatusCreated, &sb)
		execOK(t, c, sb.ID, "sh", "-c", goProject)
		return sb.ID
	}
	svc := api.ProviderRequest{Dir: "svc"}

	id := sandbox(alice, "goproxy.test")
	evs := providerStep(t, alice, id, "build", svc)
	if got := ran(evs); result(evs).Error != "" || !slices.Equal(got, []string{"resolve: go mod download", "build: go build"}) {
		t.Fatalf("build with a dependency: ran %q, result %+v; log:\n%s", got, result(evs), logText(evs))
	}
	if out := execOK(t, alice, id, "sh", "-c", "cd svc && go run ."); out != "hello from a module\n" {
		t.Errorf("the built module printed %q", out)
	}

	// Another user's sandbox: alice's module cache, which holds the module now, is not
	// its own.
	evs = providerStep(t, bob, sandbox(bob, "elsewhere.test"), "build", svc)
	if r, log := result(evs), logText(evs); r.Error == "" || !strings.Contains(r.Error+log, "elsewhere.test") || !strings.Contains(r.Error+log, "network.default") {
		t.Errorf("build with a module proxy the policy does not allow: result %+v; log:\n%s\nwant the host and the rule", r, log)
	}
}
