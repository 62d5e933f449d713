package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/api"
)

// ClientTable measures the Go client (package paddock) against what it wraps: an exec of
// `true` through it against the same request made with a bare net/http client, and a
// sandbox created and its first command run through it against the same through the CLI.
func (e *Env) ClientTable(ctx context.Context, o Options) (t *Table, err error) {
	cp, err := e.StartControlPlane(ctx, e.log)
	if err != nil {
		return nil, err
	}
	defer cp.Close()
	var tok api.Token
	if err := cp.JSON(ctx, "POST", "/api/v1/tokens", api.CreateTokenRequest{Name: "bench"}, http.StatusCreated, &tok); err != nil {
		return nil, err
	}
	c := paddock.New(cp.URL, paddock.WithToken(tok.Secret))
	sb, err := c.Sandboxes.Create(ctx, paddock.SandboxSpec{Name: "bench-client"})
	if err != nil {
		return nil, err
	}
	defer func() {
		if derr := sb.Delete(context.WithoutCancel(ctx)); derr != nil && err == nil {
			err = derr
		}
	}()
	cli, err := e.cliRunner(cp.URL, tok.Secret)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(cli.home)

	rec := newRecorder()
	bare := &http.Client{}
	timed := func(name string, f func() error) func() error {
		return func() error {
			began := time.Now()
			err := f()
			rec.add(name, ms(time.Since(began)))
			return err
		}
	}
	err = interleave(rec, o.Warmup+3, o.N,
		timed("sdk exec", func() error {
			res, err := sb.Exec(ctx, []string{"true"})
			return exitErr(res.ExitCode, err)
		}),
		timed("http exec", func() error { return bareExec(ctx, bare, cp.URL, tok.Secret, sb.ID) }),
	)
	if err != nil {
		return nil, err
	}
	created := func(id string) error { return c.Sandbox(id).Delete(context.WithoutCancel(ctx)) }
	err = interleave(rec, 1, min(o.N, 10),
		func() error {
			began := time.Now()
			s, err := c.Sandboxes.Create(ctx, paddock.SandboxSpec{})
			if err != nil {
				return err
			}
			res, err := s.Exec(ctx, []string{"true"})
			rec.add("sdk create", ms(time.Since(began)))
			return errors.Join(exitErr(res.ExitCode, err), created(s.ID))
		},
		func() error {
			began := time.Now()
			out, err := cli.run(ctx, "sandbox", "create")
			if err != nil {
				return err
			}
			id := strings.TrimSpace(out)
			_, err = cli.run(ctx, "sandbox", "exec", id, "--", "true")
			rec.add("cli create", ms(time.Since(began)))
			return errors.Join(err, created(id))
		},
	)
	if err != nil {
		return nil, err
	}
	se, he := rec.summary("sdk exec"), rec.summary("http exec")
	sc, cc := rec.summary("sdk create"), rec.summary("cli create")
	return &Table{
		Title: "14. The Go client (package paddock)",
		About: "A control plane on loopback (`server.New`), one API token. `Exec(true)` is `sb.Exec(ctx, []string{\"true\"})` of package " +
			"paddock against the same `POST /api/v1/sandboxes/{id}/exec` made with a bare `net/http` client (JSON encoded and decoded " +
			"alike), on one running sandbox, interleaved after warm-up calls. Create → first exec is `Sandboxes.Create` and `Exec(true)` " +
			"against `paddock sandbox create` and `paddock sandbox exec ID -- true` run as processes; each sandbox is deleted untimed.",
		Rows: []Row{
			{Name: "package paddock `Exec(true)`", Unit: "ms", Summary: se, Ratio: ratio(se.P50, he.P50), Target: "≤ 1.2× net/http", Met: yesNo(se.P50 <= 1.2*he.P50)},
			{Name: "bare `net/http` exec", Unit: "ms", Summary: he, Ratio: "1.00× (baseline)"},
			{Name: "package paddock create → first exec", Unit: "ms", Summary: sc, Ratio: ratio(sc.P50, cc.P50), Target: "≤ 1.2× the CLI", Met: yesNo(sc.P50 <= 1.2*cc.P50)},
			{Name: "CLI create → first exec", Unit: "ms", Summary: cc, Ratio: "1.00× (baseline)"},
		},
		Notes: []string{
			fmt.Sprintf("The client adds %.2f ms to an exec at the median (%.2f ms against %.2f ms): the same request, its error mapping and nothing else.",
				se.P50-he.P50, se.P50, he.P50),
		},
	}, nil
}

func exitErr(code int, err error) error {
	if err == nil && code != 0 {
		return fmt.Errorf("true exited %d", code)
	}
	return err
}

// bareExec is an exec of `true` as a program without the client would make it.
func bareExec(ctx context.Context, hc *http.Client, base, token, id string) error {
	body, _ := json.Marshal(api.ExecRequest{Argv: []string{"true"}})
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/api/v1/sandboxes/"+id+"/exec", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var res api.ExecResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("exec: %s: %v", resp.Status, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return exitErr(res.ExitCode, nil)
}

// cliRunner runs the built paddock binary as a signed-in user would.
type cliRunner struct {
	bin, home string
	env       []string
}

func (e *Env) cliRunner(server, token string) (*cliRunner, error) {
	home, err := os.MkdirTemp(e.Dir, "cli-")
	if err != nil {
		return nil, err
	}
	env := append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, "config"),
		paddock.EnvServer+"="+server, paddock.EnvToken+"="+token)
	return &cliRunner{bin: e.Paddock, home: home, env: env}, nil
}

func (r *cliRunner) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, r.bin, args...)
	cmd.Env = r.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("paddock %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(errb.Bytes()))
	}
	return out.String(), nil
}
