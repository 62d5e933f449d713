package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
)

// A step that meets the sandbox's memory or disk limit or its own time limit, a corrupt lockfile and a missing
// toolchain each fail the step with a message that says which, and leave the workspace as
// it was before the step.
func TestProviderStepFaults(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "p",
		Limits: api.Limits{Memory: "384M", Disk: "160M"}}), http.StatusCreated, &sb)
	execOK(t, alice, sb.ID, "sh", "-c", `mkdir app && cd app && echo '{"name": "app", "version": "1.0.0", "scripts": {"build": "node build.js"}}' > package.json && npm install --offline --no-audit --no-fund >/dev/null`)
	app := api.ProviderRequest{Dir: "app"}

	for _, c := range []struct {
		name, setup string
		// timeout is the step's time limit, in seconds (0: the default).
		timeout int
		limit   string
		want    []string
	}{
		{"memory", `require("fs").writeFileSync("half-done", ""); const a = []; for (;;) a.push(Buffer.alloc(16 << 20, 1));`, 0,
			api.LimitMemory, []string{"npm run build", "the sandbox's memory limit (384MiB) was hit"}},
		{"disk", `require("fs").writeFileSync("half-done", ""); require("child_process").execFileSync("dd", ["if=/dev/zero", "of=big", "bs=1M", "count=400"], {stdio: "inherit"});`, 0,
			api.LimitDisk, []string{"npm run build", "the sandbox's disk limit (160MiB) was reached"}},
		// The limit bounds each command: npm install before it takes a second or two,
		// and the build never ends. 20 s leaves a loaded machine room for the install.
		{"time", `require("fs").writeFileSync("half-done", ""); setInterval(() => {}, 1000);`, 20,
			api.LimitTimeout, []string{"npm run build", "killed at the step's time limit (20s)", "timeout_seconds"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			servertest.Decode(t, alice.DoToken("PUT", "/api/v1/sandboxes/"+sb.ID+"/files/content?path=app/build.js", strings.NewReader(c.setup)), http.StatusOK, nil)
			// Writing build.js is a checkpoint of its own: the step's rollback returns to it.
			was := execOK(t, alice, sb.ID, "sh", "-c", "cd app && ls -A && cat package-lock.json")
			req := app
			req.TimeoutSeconds = c.timeout
			evs := providerStep(t, alice, sb.ID, "build", req)
			r := result(evs)
			if r.Limit != c.limit {
				t.Errorf("build over the %s limit: result's limit %q, want %q", c.name, r.Limit, c.limit)
			}
			// The registries this server's sandboxes cannot reach are the log's note, not
			// the reason this build failed.
			if strings.Contains(r.Error, "registries") {
				t.Errorf("build over the %s limit: result %q blames the registries", c.name, r.Error)
			}
			for _, w := range c.want {
				if !strings.Contains(r.Error, w) {
					t.Errorf("build over the %s limit: result %q, want it to say %q; log:\n%s", c.name, r.Error, w, logText(evs))
				}
			}
			if now := execOK(t, alice, sb.ID, "sh", "-c", "cd app && ls -A && cat package-lock.json"); now != was || !logged(evs, "the workspace is as it was before build") {
				t.Errorf("after a build over the %s limit the project is\n%s\nwant it as before\n%s", c.name, now, was)
			}
		})
	}
	execOK(t, alice, sb.ID, "rm", "app/build.js")

	t.Run("corrupt lockfile", func(t *testing.T) {
		execOK(t, alice, sb.ID, "sh", "-c", `echo '{"lockfileVersion": 3, "packages": {' > app/package-lock.json`)
		evs := providerStep(t, alice, sb.ID, "build", app)
		if r := result(evs); !strings.Contains(r.Error, "npm install") || !strings.Contains(r.Error, "package-lock.json is not valid JSON") {
			t.Errorf("build with a corrupt package-lock.json: result %q, want the lockfile named; log:\n%s", r.Error, logText(evs))
		}
		if !logged(evs, "the workspace is as it was before build") {
			t.Errorf("a build with a corrupt lockfile was not rolled back")
		}
	})
	execOK(t, alice, sb.ID, "sh", "-c", "rm -rf app && mkdir svc && printf 'module example.test/svc\\n\\ngo 1.99\\n' > svc/go.mod && printf 'package main\\nfunc main() {}\\n' > svc/main.go")

	t.Run("missing toolchain", func(t *testing.T) {
		evs := providerStep(t, alice, sb.ID, "build", api.ProviderRequest{Dir: "svc"})
		if r := result(evs); !strings.Contains(r.Error, "go.mod requires go >= 1.99") || !strings.Contains(r.Error, "GOTOOLCHAIN=local") {
			t.Errorf("build of a module asking for go 1.99: result %q, want the toolchain named; log:\n%s", r.Error, logText(evs))
		}
	})
}
