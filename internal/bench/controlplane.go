package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/origins"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/wire"
)

// ControlPlane is a real control plane (server.New, as `paddock serve` builds it) over a
// runner configured under the environment's directory, serving HTTP on loopback, with one
// registered user whose live and dev sandboxes run the default app (the welcome app).
type ControlPlane struct {
	URL string
	// AppURL is the user's live apps host, where the proxy serves the live sandbox's app.
	AppURL string
	Server *server.Server
	// Client is the signed-in user's browser-like client: a cookie jar holding the session,
	// keep-alive connections enough for every concurrent worker.
	Client *http.Client
	// CSRF is the session's token, which state-changing requests (promote) carry.
	CSRF string
	// Workspaces is where the sandboxes' workspaces are on the host.
	Workspaces string

	http *http.Server
}

// benchPassword is the registered user's password; the account lives only as long as the
// control plane's temporary data dir.
const benchPassword = "correct horse battery bench"

// StartControlPlane starts a control plane and signs a user up, and waits until the user's
// live sandbox's app answers through the proxy. Close stops it and destroys its sandboxes.
func (e *Env) StartControlPlane(ctx context.Context, log *slog.Logger) (cp *ControlPlane, err error) {
	return e.startControlPlane(ctx, log, nil, nil)
}

// startControlPlane is StartControlPlane with edit, when set, changing the configuration,
// and ready, when set, saying when the live sandbox's app answers (default: waitApp).
func (e *Env) startControlPlane(ctx context.Context, log *slog.Logger, edit func(*server.Config), ready func(context.Context, *ControlPlane) error) (cp *ControlPlane, err error) {
	return e.startControlPlaneWith(ctx, log, edit, server.Options{}, ready)
}

// startControlPlaneWith is startControlPlane with the server's options (its egress proxy's).
func (e *Env) startControlPlaneWith(ctx context.Context, log *slog.Logger, edit func(*server.Config), opts server.Options, ready func(context.Context, *ControlPlane) error) (cp *ControlPlane, err error) {
	if ready == nil {
		ready = func(ctx context.Context, cp *ControlPlane) error {
			_, err := cp.waitApp(ctx, time.Minute)
			return err
		}
	}
	started, err := e.startBare(ctx, log, edit, opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			// Not cp: a failed return has already set it to nil.
			started.Close()
		}
	}()
	cp = started
	if err := cp.signUp(ctx, benchUser); err != nil {
		return nil, err
	}
	if err := cp.handoff(ctx); err != nil {
		return nil, err
	}
	if err := ready(ctx, cp); err != nil {
		return nil, err
	}
	return cp, nil
}

// startBare starts a control plane that signs nobody up, serving on loopback.
func (e *Env) startBare(ctx context.Context, log *slog.Logger, edit func(*server.Config), opts server.Options) (*ControlPlane, error) {
	// A directory of its own: a run starts several control planes, each signing the same
	// user up in a database of its own.
	dir, err := os.MkdirTemp(e.Dir, "cp-")
	if err != nil {
		return nil, err
	}
	// Searchable by all, as the environment's directory is: a container's root under a
	// user namespace is another host id, which must reach its bundle below it.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	rc, err := e.runnerConfig(filepath.Base(dir))
	if err != nil {
		return nil, err
	}
	cfg := server.Config{Runner: rc, Listen: "127.0.0.1:0"}
	if edit != nil {
		edit(&cfg)
	}
	s, err := server.New(ctx, cfg, log, opts)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		s.Close()
		return nil, err
	}
	cp := &ControlPlane{URL: "http://" + lis.Addr().String(), Server: s, Client: newLoadClient(), Workspaces: cfg.Runner.WorkspaceRoot,
		http: &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}}
	go cp.http.Serve(lis)
	return cp, nil
}

// runnerConfig is a runner configuration like the environment's, with its data and state
// under Dir/sub, so that a control plane's sandboxes and database are its own.
func (e *Env) runnerConfig(sub string) (runner.Config, error) {
	cfg := runner.DefaultConfig()
	cfg.DataDir = filepath.Join(e.Dir, sub, "data")
	cfg.StateDir = filepath.Join(e.Dir, sub, "state")
	cfg.Agent, cfg.Runc = e.Agent, e.Runc
	cfg.DiskReserve = benchDiskReserve
	return runner.LoadConfigFrom(cfg)
}

// benchDiskReserve is the bench's disk reserve: its tables start many sandboxes, each
// promised a sparse disk it barely writes, and the check's cost does not depend on it.
const benchDiskReserve = 2 << 30

// newLoadClient is the one HTTP client every load benchmark uses, direct or proxied: keep-alive,
// a connection per worker kept idle between requests, a cookie jar.
func newLoadClient() *http.Client {
	jar, _ := cookiejar.New(nil)
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 128, IdleConnTimeout: time.Minute, DisableCompression: true,
		DialContext: origins.DialLocalhost(&net.Dialer{Timeout: 30 * time.Second})}
	return &http.Client{Jar: jar, Transport: tr, Timeout: time.Minute}
}

// Close stops serving and destroys the control plane's sandboxes.
func (cp *ControlPlane) Close() {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = cp.http.Shutdown(sctx)
	cp.Client.CloseIdleConnections()
	cp.Server.DestroySandboxes(context.Background())
	cp.Server.Close()
}

// signUp registers username through POST /auth/register (which signs the client in),
// reads the session's CSRF token and asks for the account's sandboxes (POST /auth/start).
func (cp *ControlPlane) signUp(ctx context.Context, username string) error {
	if err := cp.JSON(ctx, "POST", "/auth/register", api.Credentials{Username: username, Password: benchPassword}, http.StatusCreated, nil); err != nil {
		return err
	}
	var sess api.Session
	if err := cp.JSON(ctx, "GET", "/auth/session", nil, http.StatusOK, &sess); err != nil {
		return err
	}
	cp.CSRF = sess.CSRFToken
	if err := cp.JSON(ctx, "POST", "/auth/start", nil, http.StatusNoContent, nil); err != nil {
		return err
	}
	u, err := url.Parse(cp.URL)
	if err != nil {
		return err
	}
	cp.AppURL = "http://" + net.JoinHostPort(origins.Host{Kind: origins.KindLive, ID: sess.User.ID}.Label()+"."+origins.DefaultAppsDomain, u.Port())
	return nil
}

// handoff signs the client in on the live apps host, as a browser's first visit does.
func (cp *ControlPlane) handoff(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, "GET", cp.AppURL+"/", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/html")
	resp, err := cp.Client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	for _, c := range cp.Client.Jar.Cookies(req.URL) {
		if c.Name == origins.CookieName {
			return nil
		}
	}
	return fmt.Errorf("the handoff to %s set no cookie (it ended %s at %s)", cp.AppURL, resp.Status, resp.Request.URL)
}

// JSON sends a request with the session (and CSRF token) and decodes the answer into out
// (nil: discard), unless its status is not want.
func (cp *ControlPlane) JSON(ctx context.Context, method, path string, body any, want int, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, cp.URL+path, rd)
	if err != nil {
		return err
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("X-CSRF-Token", cp.CSRF)
	resp, err := cp.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(data))
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return nil
}

// Promote swaps the user's live and dev sandboxes and returns the roles after the swap.
func (cp *ControlPlane) Promote(ctx context.Context) (api.Roles, error) {
	var r api.Roles
	err := cp.JSON(ctx, "POST", "/api/v1/promote", nil, http.StatusOK, &r)
	return r, err
}

// waitApp polls /api/info through the proxy until the live sandbox's app answers, and
// returns the sandbox it names.
func (cp *ControlPlane) waitApp(ctx context.Context, limit time.Duration) (string, error) {
	deadline := time.Now().Add(limit)
	for {
		sb, err := servedBy(ctx, cp.Client, cp.AppURL+"/api/info")
		if err == nil {
			return sb, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", fmt.Errorf("the live sandbox's app did not answer within %s: %w", limit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// servedBy GETs the welcome app's /api/info and returns the sandbox it names.
func servedBy(ctx context.Context, hc *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(data))
	}
	var info struct {
		Sandbox string `json:"sandbox"`
	}
	if err := json.Unmarshal(data, &info); err != nil {
		return "", fmt.Errorf("GET %s: %w", url, err)
	}
	if info.Sandbox == "" {
		return "", errors.New("GET " + url + ": the app named no sandbox")
	}
	return info.Sandbox, nil
}

// DirectApp is the welcome app — the very binary and subcommand every sandbox runs by
// default (`paddock-agent welcome`) — run as a process of its own on a host loopback
// port: the baseline of the proxy's benchmarks. A process of its own, as in the sandbox,
// so that the baseline's app does not share the harness's Go scheduler and heap.
type DirectApp struct {
	URL string
	cmd *exec.Cmd
}

// StartDirectApp runs agent's welcome app on a free loopback port and waits until it
// answers.
func StartDirectApp(agent string) (*DirectApp, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := lis.Addr().(*net.TCPAddr)
	lis.Close()
	cmd := exec.Command(agent, wire.WelcomeCommand(agent, addr.Port)[1:]...)
	cmd.Env = append(os.Environ(), wire.SandboxIDEnv+"=direct")
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("direct app: %w", err)
	}
	d := &DirectApp{URL: "http://" + addr.String(), cmd: cmd}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr.String()); err == nil {
			c.Close()
			return d, nil
		}
		if time.Now().After(deadline) {
			d.Close()
			return nil, fmt.Errorf("direct app: nothing listening on %s after 10 s", addr)
		}
	}
}

// Close stops the app.
func (d *DirectApp) Close() {
	_ = d.cmd.Process.Kill()
	_ = d.cmd.Wait()
}
