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

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/api"
)

// ClientTable measures the Go client (package paddock) against what it wraps: an exec of
// `true` through it against the same request made with a bare net/http client and against
// the MCP tool run_command through `paddock mcp` over stdio, and a sandbox created and
// its first command run through it against the same through the CLI.
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
	if err := started(sb); err != nil {
		return nil, err
	}
	cli, err := e.cliRunner(cp.URL, tok.Secret)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(cli.home)

	mcp, err := cli.mcpSession(ctx)
	if err != nil {
		return nil, err
	}
	defer mcp.Close()

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
		timed("mcp exec", func() error { return mcpExec(ctx, mcp, sb.ID) }),
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
			if err := started(s); err != nil {
				return errors.Join(err, created(s.ID))
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
	se, he, me := rec.summary("sdk exec"), rec.summary("http exec"), rec.summary("mcp exec")
	sc, cc := rec.summary("sdk create"), rec.summary("cli create")
	return &Table{
		Title: "14. The Go client (package paddock)",
		About: "A control plane on loopback (`server.New`), one API token. `Exec(true)` is `sb.Exec(ctx, []string{\"true\"})` of package " +
			"paddock against the same `POST /api/v1/sandboxes/{id}/exec` made with a bare `net/http` client (JSON encoded and decoded " +
			"alike), and against the MCP tool call `run_command` with `argv: [\"true\"]` made by the official Go SDK's client " +
			"(github.com/modelcontextprotocol/go-sdk) to `paddock mcp` running as a child process, over its stdin and stdout; all three " +
			"on one running sandbox, interleaved after warm-up calls. Create → first exec is `Sandboxes.Create` and `Exec(true)` " +
			"against `paddock sandbox create` and `paddock sandbox exec ID -- true` run as processes; each sandbox is deleted untimed.",
		Rows: []Row{
			{Name: "package paddock `Exec(true)`", Unit: "ms", Summary: se, Ratio: ratio(se.P50, he.P50), Target: "≤ 1.2× net/http", Met: yesNo(se.P50 <= 1.2*he.P50)},
			{Name: "bare `net/http` exec", Unit: "ms", Summary: he, Ratio: "1.00× (baseline)"},
			{Name: "MCP over stdio `run_command` [\"true\"]", Unit: "ms", Summary: me, Ratio: ratio(me.P50, se.P50) + " of package paddock",
				Target: "≤ package paddock + 2 ms", Met: yesNo(me.P50 <= se.P50+2)},
			{Name: "package paddock create → first exec", Unit: "ms", Summary: sc, Ratio: ratio(sc.P50, cc.P50), Target: "≤ 1.2× the CLI", Met: yesNo(sc.P50 <= 1.2*cc.P50)},
			{Name: "CLI create → first exec", Unit: "ms", Summary: cc, Ratio: "1.00× (baseline)"},
		},
		Notes: []string{
			fmt.Sprintf("The client adds %.2f ms to an exec at the median (%.2f ms against %.2f ms): the same request, its error mapping and nothing else.",
				se.P50-he.P50, se.P50, he.P50),
			fmt.Sprintf("MCP over stdio adds %.2f ms to the client's exec at the median (%.2f ms against %.2f ms): the JSON-RPC round trip "+
				"through the child's pipes, the tool's schema validation, and the command run as a stream (a WebSocket, whose output the "+
				"tool could send as progress notifications) rather than one request.", me.P50-se.P50, me.P50, se.P50),
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
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("exec: %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	var res api.ExecResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return exitErr(res.ExitCode, nil)
}

// mcpSession starts `paddock mcp` as the CLI's user and connects the official SDK's
// client to it over the child's stdin and stdout, as an agent host does.
func (r *cliRunner) mcpSession(ctx context.Context) (*sdk.ClientSession, error) {
	cmd := exec.Command(r.bin, "mcp")
	cmd.Env = r.env
	cmd.Stderr = os.Stderr
	c := sdk.NewClient(&sdk.Implementation{Name: "paddock-bench", Version: "1"}, nil)
	s, err := c.Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return nil, fmt.Errorf("paddock mcp: %w", err)
	}
	return s, nil
}

// mcpExec runs `true` with the run_command tool.
func mcpExec(ctx context.Context, s *sdk.ClientSession, id string) error {
	res, err := s.CallTool(ctx, &sdk.CallToolParams{Name: "run_command", Arguments: map[string]any{"sandbox": id, "argv": []string{"true"}}})
	if err != nil {
		return fmt.Errorf("mcp run_command: %w", err)
	}
	if res.IsError {
		return fmt.Errorf("mcp run_command: an error result: %v", res.Content)
	}
	out, _ := res.StructuredContent.(map[string]any)
	if code, _ := out["exit_code"].(float64); code != 0 || out == nil {
		return fmt.Errorf("mcp run_command: true exited %v", out["exit_code"])
	}
	return nil
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

// started is the reason a sandbox the server made did not start (the API answers such a
// create with state failed, not an error), or nil.
func started(sb *paddock.Sandbox) error {
	if sb.Info.State == api.StateFailed {
		return fmt.Errorf("sandbox %s did not start: %s", sb.ID, sb.Info.Error)
	}
	return nil
}
