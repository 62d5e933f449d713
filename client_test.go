package paddock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// The server's error taxonomy comes back as the same sentinels, with its message.
func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		status int
		code   string
		want   error
	}{
		{400, api.CodeInvalidArgument, errdefs.ErrInvalidArgument},
		{401, api.CodeUnauthenticated, errdefs.ErrUnauthenticated},
		{403, api.CodePermissionDenied, errdefs.ErrPermissionDenied},
		{404, api.CodeNotFound, errdefs.ErrNotFound},
		{409, api.CodeAlreadyExists, errdefs.ErrAlreadyExists},
		{409, api.CodeFailedPrecondition, errdefs.ErrFailedPrecondition},
		{429, api.CodeLimitExceeded, errdefs.ErrLimitExceeded},
		{503, api.CodeUnavailable, errdefs.ErrUnavailable},
		{504, api.CodeDeadlineExceeded, errdefs.ErrDeadlineExceeded},
	} {
		t.Run(tc.code, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Authorization") != "Bearer secret" {
					t.Errorf("Authorization %q", r.Header.Get("Authorization"))
				}
				api.WriteErrorCode(w, tc.status, tc.code, "sandbox sb-x: it went wrong")
			}))
			defer srv.Close()
			_, err := paddock.New(srv.URL, paddock.WithToken("secret")).Sandboxes.Get(context.Background(), "sb-x")
			var ce *paddock.Error
			if !errors.Is(err, tc.want) || !errors.As(err, &ce) || err.Error() != "sandbox sb-x: it went wrong" || ce.Status != tc.status {
				t.Errorf("got %v (%#v), want %v with the server's message", err, err, tc.want)
			}
		})
	}
}

func TestErrorNotInTheAPIShape(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<html>bad gateway</html>", http.StatusBadGateway)
	}))
	defer srv.Close()
	_, err := paddock.New(srv.URL, paddock.WithToken("secret")).Me(context.Background())
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "502") {
		t.Errorf("got %v", err)
	}
}

func TestUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c := paddock.New(url, paddock.WithToken("secret-token"))
	_, err := c.Me(context.Background())
	if !errors.Is(err, errdefs.ErrUnavailable) || strings.Contains(err.Error(), "secret-token") {
		t.Errorf("got %v", err)
	}
	_, err = c.Sandbox("sb-x").Stream(context.Background(), api.StreamStart{Argv: []string{"true"}})
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("stream: got %v", err)
	}
}

func TestCredentials(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	t.Setenv(paddock.EnvServer, "")
	t.Setenv(paddock.EnvToken, "")
	if _, err := paddock.LoadCredentials(); !errors.Is(err, errdefs.ErrUnauthenticated) || !strings.Contains(err.Error(), "paddock login") {
		t.Fatalf("no credentials: %v", err)
	}
	in := paddock.Credentials{Server: "http://example.test:8080", Token: "pdk_secret", Username: "alice", TokenID: "tok1"}
	if err := paddock.SaveCredentials(in); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "paddock", "credentials.json")
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, mode %v, want %o", p, err, fi.Mode().Perm(), want)
		}
	}
	got, err := paddock.LoadCredentials()
	if err != nil || got != in {
		t.Fatalf("load: %v %+v", err, got)
	}
	t.Setenv(paddock.EnvToken, "pdk_other")
	if got, _ := paddock.LoadCredentials(); got.Token != "pdk_other" || got.Server != in.Server {
		t.Errorf("PADDOCK_TOKEN does not override: %v", got)
	}
	t.Setenv(paddock.EnvServer, "http://other.test")
	if got, _ := paddock.LoadCredentials(); got.Server != "http://other.test" {
		t.Errorf("PADDOCK_SERVER does not override: %v", got)
	}
	var logged strings.Builder
	slog.New(slog.NewTextHandler(&logged, nil)).Info("creds", "c", in)
	if s := logged.String() + fmt.Sprint(in) + fmt.Sprintf("%+v", in); strings.Contains(s, "pdk_secret") {
		t.Errorf("the token is printed: %s", s)
	}
	if err := paddock.RemoveCredentials(); err != nil {
		t.Fatal(err)
	}
	if err := paddock.RemoveCredentials(); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second remove: %v", err)
	}
}

// A limit the server names comes back in Error.Limit, and the error is ErrLimitExceeded.
func TestErrorNamesTheLimit(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		api.WriteError(w, nil, &api.LimitError{Limit: api.LimitDisk, Err: fmt.Errorf("the sandbox's disk limit (96MiB) was reached: %w", errdefs.ErrLimitExceeded)})
	}))
	defer srv.Close()
	_, err := paddock.New(srv.URL).Sandbox("sb-x").PutArchive(context.Background(), "dir", strings.NewReader(""))
	var pe *paddock.Error
	if !errors.Is(err, paddock.ErrLimitExceeded) || !errors.As(err, &pe) || pe.Limit != paddock.LimitDisk || pe.Status != 429 {
		t.Errorf("got %v (%#v), want limit disk", err, err)
	}
}

// The package's names for the API's values are the API's.
func TestConstantsAreTheAPIs(t *testing.T) {
	for _, c := range [][2]any{
		{paddock.LimitTimeout, api.LimitTimeout}, {paddock.LimitMemory, api.LimitMemory}, {paddock.LimitPids, api.LimitPids},
		{paddock.LimitFileSize, api.LimitFileSize}, {paddock.LimitDisk, api.LimitDisk},
		{paddock.StateCreating, api.StateCreating}, {paddock.StateRunning, api.StateRunning}, {paddock.StateStopped, api.StateStopped},
		{paddock.StateFailed, api.StateFailed}, {paddock.StateLost, api.StateLost},
		{paddock.Stdout, api.StreamStdout}, {paddock.Stderr, api.StreamStderr},
	} {
		if c[0] != c[1] {
			t.Errorf("%v, the API's %v", c[0], c[1])
		}
	}
}
