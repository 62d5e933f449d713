package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/agent/coder"
	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/gateway"
	"github.com/paddockhq/paddock/internal/gateway/scripted"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/wire"
)

// agentFixture is the coding agent (internal/agent/coder) in the harness's process, a
// scripted provider on loopback, and the real gateway between them, as in a sandbox.
type agentFixture struct {
	provider atomic.Pointer[scripted.Provider]
	front    *http.Server
	up       *http.Server
	baseURL  string
	upURL    string // the provider itself
	dir      string

	mu sync.Mutex
	// arrived and answered are when each request of the turn arrived at the provider and
	// when its answer ended, in order.
	arrived, answered []time.Time
}

func startAgentFixture() (*agentFixture, error) {
	f := &agentFixture{}
	var err error
	if f.dir, err = os.MkdirTemp("", "paddock-bench-agent-"); err != nil {
		return nil, err
	}
	upL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Close()
		return nil, err
	}
	f.up = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.arrived = append(f.arrived, time.Now())
		f.mu.Unlock()
		sw := &stampedWriter{ResponseWriter: w}
		f.provider.Load().ServeHTTP(sw, r)
		end := sw.last
		if end.IsZero() {
			end = time.Now()
		}
		f.mu.Lock()
		f.answered = append(f.answered, end)
		f.mu.Unlock()
	})}
	go f.up.Serve(upL)
	f.upURL = "http://" + upL.Addr().String()
	gw, err := gateway.New(gateway.Config{Providers: []gateway.Provider{
		{Name: "scripted", Kind: gateway.KindOpenAI, BaseURL: f.upURL, APIKey: "sk-bench-platform"},
	}}, gateway.Options{Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Close()
		return nil, err
	}
	frontL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Close()
		return nil, err
	}
	inner := http.StripPrefix("/gateway", gw)
	caller := gateway.Caller{UserID: "bench", SandboxID: "sb-bench"}
	f.front = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner.ServeHTTP(w, r.WithContext(gateway.WithCaller(r.Context(), caller)))
	})}
	go f.front.Serve(frontL)
	f.baseURL = "http://" + frontL.Addr().String() + "/gateway/scripted/v1"
	if err := os.MkdirAll(f.dir+"/ws", 0o755); err != nil {
		f.Close()
		return nil, err
	}
	if err := os.WriteFile(f.dir+"/ws/a.txt", []byte("hello\n"), 0o644); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// stampedWriter records when its handler last began a write or a flush: the end of the
// answer at the provider. The agent may read that last event and send its next request
// before the handler has returned, so the time after ServeHTTP is no bound on it.
type stampedWriter struct {
	http.ResponseWriter
	last time.Time
}

func (w *stampedWriter) Write(b []byte) (int, error) {
	w.last = time.Now()
	return w.ResponseWriter.Write(b)
}

func (w *stampedWriter) Flush() {
	w.last = time.Now()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (f *agentFixture) Close() {
	for _, s := range []*http.Server{f.front, f.up} {
		if s != nil {
			s.Close()
		}
	}
	os.RemoveAll(f.dir)
}

// turn runs one turn of a fresh conversation against script and returns its time and
// the provider's times: each request's arrival and its answer's end.
func (f *agentFixture) turn(ctx context.Context, script string) (whole time.Duration, arrived, answered []time.Time, err error) {
	p, steps, err := f.load(script)
	if err != nil {
		return 0, nil, nil, err
	}
	state := f.dir + "/state"
	if err := coder.Reset(state); err != nil {
		return 0, nil, nil, err
	}
	a, err := coder.New(coder.Config{Workspace: f.dir + "/ws", StateDir: state, BaseURL: f.baseURL,
		APIKey: "sandbox-placeholder", Model: "bench"}, func(coder.Event) {})
	if err != nil {
		return 0, nil, nil, err
	}
	defer a.Close()
	began := time.Now()
	_, err = a.Run(ctx, "go")
	whole = time.Since(began)
	arrived, answered, werr := f.times(p, steps)
	return whole, arrived, answered, errors.Join(err, werr)
}

// load makes script the provider's, and forgets the last one's times.
func (f *agentFixture) load(script string) (*scripted.Provider, int, error) {
	sc, err := scripted.Parse([]byte(script))
	if err != nil {
		return nil, 0, err
	}
	p := scripted.New(sc)
	f.provider.Store(p)
	f.mu.Lock()
	f.arrived, f.answered = nil, nil
	f.mu.Unlock()
	return p, len(sc.Steps), nil
}

// times are when each of the script's requests arrived and its answer ended, once the
// script is done.
func (f *agentFixture) times(p *scripted.Provider, steps int) (arrived, answered []time.Time, err error) {
	err = p.Err()
	if err == nil && !p.Done() {
		err = errors.New("the turn ended before its script")
	}
	// The agent stops reading at the stream's last event, which can be before the
	// provider's handler has returned.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		f.mu.Lock()
		n := len(f.answered)
		f.mu.Unlock()
		if n >= steps {
			break
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil && (len(f.arrived) != steps || len(f.answered) != steps) {
		err = fmt.Errorf("the provider saw %d requests and answered %d, not %d", len(f.arrived), len(f.answered), steps)
	}
	return f.arrived, f.answered, err
}

// AgentTable measures the coding agent's own cost: a turn against a provider that takes
// a fixed 100 ms per answer, and a tool call's round trip against the same operation
// through the API.
func (e *Env) AgentTable(ctx context.Context, o Options) (t *Table, err error) {
	f, err := startAgentFixture()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cp, err := e.startControlPlane(ctx, e.log, func(c *server.Config) {
		c.Gateway = gateway.Config{AgentModel: "bench", Providers: []gateway.Provider{
			{Name: "scripted", Kind: gateway.KindOpenAI, BaseURL: f.upURL, APIKey: "sk-bench-platform"}}}
	}, nil)
	if err != nil {
		return nil, err
	}
	defer cp.Close()
	var tok api.Token
	if err := cp.JSON(ctx, "POST", "/api/v1/tokens", api.CreateTokenRequest{Name: "bench"}, http.StatusCreated, &tok); err != nil {
		return nil, err
	}
	c := paddock.New(cp.URL, paddock.WithToken(tok.Secret))
	sb, err := c.Sandboxes.Create(ctx, paddock.SandboxSpec{Name: "bench-agent"})
	if err != nil {
		return nil, err
	}
	defer func() {
		if derr := sb.Delete(context.WithoutCancel(ctx)); derr != nil && err == nil {
			err = derr
		}
	}()
	if _, err := sb.WriteFile(ctx, "a.txt", strings.NewReader("hello\n"), 0o644); err != nil {
		return nil, err
	}

	rec := newRecorder()
	const answer = `{"steps": [{"respond": {"delay_ms": 100, "content": "done"}}]}`
	tool := func(name, call string) func() error {
		return func() error {
			script := `{"steps": [{"respond": {"tool_calls": [` + call + `]}}, {"expect": {"last_role": "tool"}, "respond": {"content": "ok"}}]}`
			p, steps, err := f.load(script)
			if err != nil {
				return err
			}
			res, err := sb.Run(ctx, paddock.ExecRequest{Argv: []string{wire.AgentPath, wire.CodeSubcommand, "--reset", "--", "go"}, TimeoutMS: 120_000})
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("paddock-agent code: exit %d: %s", res.ExitCode, tail(string(res.Stderr)))
			}
			if err != nil {
				return err
			}
			arrived, answered, err := f.times(p, steps)
			if err != nil {
				return err
			}
			// From the end of the tool call's answer to the request carrying its result.
			rec.add(name, ms(arrived[1].Sub(answered[0])))
			return nil
		}
	}
	err = interleave(rec, o.Warmup+2, o.N,
		func() error {
			whole, arrived, answered, err := f.turn(ctx, answer)
			if err != nil {
				return err
			}
			rec.add("turn", ms(whole))
			rec.add("provider", ms(answered[0].Sub(arrived[0])))
			return nil
		},
		tool("tool read", `{"name": "read_file", "arguments": {"path": "a.txt"}}`),
		tool("tool run", `{"name": "run_command", "arguments": {"command": "true"}}`),
		func() error {
			began := time.Now()
			r, err := sb.ReadFile(ctx, "a.txt")
			if err != nil {
				return err
			}
			b, err := io.ReadAll(r)
			r.Close()
			rec.add("api read", ms(time.Since(began)))
			if err == nil && string(b) != "hello\n" {
				err = fmt.Errorf("read a.txt through the API: %q", b)
			}
			return err
		},
		func() error {
			began := time.Now()
			res, err := sb.Exec(ctx, []string{"true"})
			rec.add("api exec", ms(time.Since(began)))
			return exitErr(res.ExitCode, err)
		},
	)
	if err != nil {
		return nil, err
	}
	tu, pr := rec.summary("turn"), rec.summary("provider")
	tr, ar := rec.summary("tool read"), rec.summary("api read")
	tx, ax := rec.summary("tool run"), rec.summary("api exec")
	return &Table{
		Title: "19. The coding agent: a turn's overhead, a tool call's round trip",
		About: fmt.Sprintf("A scripted provider (internal/gateway/scripted, streaming OpenAI chat completions) on a loopback port "+
			"behind the real provider gateway. *A turn*: the coding agent (internal/agent/coder, as `paddock-agent code` runs it) in the "+
			"harness's process, on a workspace in a temporary directory of the host, through the gateway mounted under /gateway as "+
			"`paddock serve` does; a fresh conversation whose one answer (`done`) the provider sends after a fixed 100 ms, from `Run` "+
			"called to its return, against *the provider's time*, from the request's arrival at the provider to the end of its answer. "+
			"*A tool call's round trip*: `paddock-agent code --reset` run in a container sandbox of a control plane on loopback (through "+
			"`Exec`, untimed), whose gateway is in front of the same provider; the model calls `read_file` of a 6-byte file or "+
			"`run_command` of `true`, and the round trip is from the end of that answer at the provider to the arrival of the next "+
			"request, which carries the tool's result (the relay of the answer's end through the gateway and the sandbox's services "+
			"channel, the agent's parsing, the tool in the sandbox, the next request back the same way, while the conversation is written). "+
			"*Through the API*: the same operation on the same sandbox by package paddock (`ReadFile(\"a.txt\")`, `Exec(true)`). "+
			"%d samples of each, interleaved after warm-up rounds.", o.N),
		Rows: []Row{
			{Name: "a turn, 100 ms provider", Unit: "ms", Summary: tu, Ratio: ratio(tu.P50, pr.P50), Target: "≤ 1.2× the provider", Met: yesNo(tu.P50 <= 1.2*pr.P50)},
			{Name: "the provider's time in that turn", Unit: "ms", Summary: pr, Ratio: "1.00× (baseline)"},
			{Name: "tool call `read_file`, round trip", Unit: "ms", Summary: tr, Ratio: ratio(tr.P50, ar.P50), Target: "≤ 1.5× the API", Met: yesNo(tr.P50 <= 1.5*ar.P50)},
			{Name: "API `ReadFile`", Unit: "ms", Summary: ar, Ratio: "1.00× (baseline)"},
			{Name: "tool call `run_command` `true`, round trip", Unit: "ms", Summary: tx, Ratio: ratio(tx.P50, ax.P50), Target: "≤ 1.5× the API", Met: yesNo(tx.P50 <= 1.5*ax.P50)},
			{Name: "API `Exec(true)`", Unit: "ms", Summary: ax, Ratio: "1.00× (baseline)"},
		},
		Notes: []string{
			fmt.Sprintf("The agent and the gateway add %.2f ms to a turn whose provider takes %.2f ms at the median (%s; target ≤ 1.2×: %s).",
				tu.P50-pr.P50, pr.P50, ratio(tu.P50, pr.P50), metWord(tu.P50 <= 1.2*pr.P50)),
			fmt.Sprintf("A tool call's round trip is %.2f ms for `read_file` against %.2f ms through the API, %.2f ms for `run_command` `true` "+
				"against %.2f ms: the agent runs its tools in the sandbox itself, so a call costs the model's next request through the "+
				"services channel and the gateway, not a request to the control plane and on to the sandbox.",
				tr.P50, ar.P50, tx.P50, ax.P50),
		},
	}, nil
}
