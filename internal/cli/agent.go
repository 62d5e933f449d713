package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
)

func newAgentCommand(code *int) *cobra.Command {
	var model, apiName, provider string
	var maxSteps int
	var reset, raw bool
	c := &cobra.Command{
		Use:   "agent ID MESSAGE...",
		Short: "ask the coding agent in a sandbox to do something",
		Long: `agent runs one turn of the coding agent in the sandbox (paddock-agent code, as the
sandbox user, through the provider gateway) and shows each step as it happens: the
model's text, every tool call and its result, and the turn's checkpoint, which
paddock undo ID takes back. The conversation continues from the sandbox's last turn;
--reset starts another.

The agent asks the provider and model you chose (paddock agent config), else the
server's default; --provider, --model and --api choose for this run only.

Exit status: 0 when the model answered; 1 when the turn stopped first (the last line
says why: the step budget, the provider down, rate limited or out of budget, a stream
cut mid-way); 125 when paddock could not run it.`,
		Args: minArgs(2, "ID and a MESSAGE"),
		RunE: func(c *cobra.Command, args []string) error {
			argv := []string{wire.AgentPath, wire.CodeSubcommand}
			if model != "" {
				if err := wire.CheckAgentModel(model); err != nil {
					return fmt.Errorf("--model: %w: %w", err, errdefs.ErrInvalidArgument)
				}
				argv = append(argv, "--model", model)
			}
			if provider != "" {
				if err := checkProvider(provider); err != nil {
					return err
				}
				argv = append(argv, "--provider", provider)
			}
			switch apiName {
			case "":
			case "openai", "anthropic":
				argv = append(argv, "--api", apiName)
			default:
				return fmt.Errorf("--api %q: want openai or anthropic: %w", apiName, errdefs.ErrInvalidArgument)
			}
			if maxSteps != 0 {
				argv = append(argv, "--max-steps", strconv.Itoa(maxSteps))
			}
			if reset {
				argv = append(argv, "--reset")
			}
			argv = append(argv, "--", strings.Join(args[1:], " "))
			return runAgent(c, args[0], argv, raw, code)
		},
	}
	fl := c.Flags()
	fl.StringVar(&model, "model", "", "the model to ask (default the sandbox's PADDOCK_AGENT_MODEL)")
	fl.StringVar(&provider, "provider", "", "the gateway's provider to ask, by name (default your choice, else the gateway's first OpenAI-style provider, else its Anthropic one)")
	fl.StringVar(&apiName, "api", "", "the provider to ask, by its API: openai or anthropic (the gateway's first of that kind)")
	fl.IntVar(&maxSteps, "max-steps", 0, "the most answers of the model in this turn (default 40)")
	fl.BoolVar(&reset, "reset", false, "forget the sandbox's conversation and start another")
	fl.BoolVar(&raw, "json", false, "print the agent's events as JSON lines, as they come")
	c.AddCommand(newAgentConfigCommand())
	return c
}

func newAgentConfigCommand() *cobra.Command {
	var provider, model string
	var reset bool
	c := &cobra.Command{
		Use:   "config [--provider NAME] [--model M]",
		Short: "show or set the provider and model your coding agent asks",
		Long: `config shows the provider and model the coding agent asks when you run it (here or
in the desktop's Agent pane), and the gateway's providers there are to choose from.
--provider and --model set them, each leaving the other as it is; an empty value, or
--reset for both, goes back to the server's default.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := connect()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
			defer cancel()
			cur, err := cl.AgentSettings(ctx)
			if err != nil {
				return err
			}
			fl := c.Flags()
			if reset || fl.Changed("provider") || fl.Changed("model") {
				choice := cur.AgentChoice
				if reset {
					choice = paddock.AgentChoice{}
				}
				if fl.Changed("provider") {
					choice.Provider = provider
				}
				if fl.Changed("model") {
					choice.Model = model
				}
				if cur, err = cl.SetAgentChoice(ctx, choice); err != nil {
					return err
				}
			}
			printAgentSettings(c.OutOrStdout(), cur)
			return nil
		},
	}
	fl := c.Flags()
	fl.StringVar(&provider, "provider", "", "the gateway's provider, by name (empty: the server's default)")
	fl.StringVar(&model, "model", "", "the model (empty: the server's default)")
	fl.BoolVar(&reset, "reset", false, "go back to the server's default provider and model")
	return c
}

// printAgentSettings shows the choice, what the default is, and the providers.
func printAgentSettings(w io.Writer, s paddock.AgentSettings) {
	provider, model := s.Provider, s.Model
	if provider == "" {
		provider = "(the server's default: its first OpenAI-style provider, else its first Anthropic one)"
	}
	if model == "" {
		model = "(the server's default"
		if s.DefaultModel != "" {
			model += ": " + s.DefaultModel
		}
		model += ")"
	}
	fmt.Fprintf(w, "provider: %s\nmodel:    %s\nproviders:", provider, model)
	if len(s.Providers) == 0 {
		fmt.Fprint(w, " none (the server configures no gateway)")
	}
	for _, p := range s.Providers {
		fmt.Fprintf(w, " %s (%s)", p.Name, p.Kind)
	}
	fmt.Fprintln(w)
}

// checkProvider refuses a provider the server's gateway does not have, naming those it
// has, before anything runs in the sandbox.
func checkProvider(name string) error {
	cl, err := connect()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	s, err := cl.AgentSettings(ctx)
	if err != nil {
		return err
	}
	var names []string
	for _, p := range s.Providers {
		if p.Name == name {
			return nil
		}
		names = append(names, p.Name)
	}
	return fmt.Errorf("--provider %q: not one of the gateway's providers (%s): %w", errdefs.Clip(name, 64), strings.Join(names, ", "), errdefs.ErrInvalidArgument)
}

func runAgent(c *cobra.Command, id string, argv []string, raw bool, code *int) error {
	cl, err := connect()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	dialCtx, dialCancel := context.WithTimeout(ctx, requestTimeout)
	st, err := cl.Sandbox(id).Stream(dialCtx, api.StreamStart{Argv: argv, Cwd: wire.WorkspacePath})
	dialCancel()
	if err != nil {
		return err
	}
	defer st.Close()
	pr, pw := io.Pipe()
	rendered := make(chan error, 1)
	go func() {
		if raw {
			_, err := io.Copy(c.OutOrStdout(), pr)
			rendered <- err
			return
		}
		rendered <- renderEvents(pr, c.OutOrStdout())
	}()
	exit, err := st.Copy(ctx, pw, c.ErrOrStderr())
	pw.Close()
	rerr := <-rendered
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(c.ErrOrStderr(), "paddock: interrupted; the conversation keeps what the turn had done")
		*code = exitInterrupted
		return nil
	}
	if err != nil {
		return err
	}
	if rerr != nil {
		return fmt.Errorf("showing the agent's events: %w", rerr)
	}
	if exit.Error != "" {
		fmt.Fprintf(c.ErrOrStderr(), "paddock: %s\n", exit.Error)
	}
	*code = signalExit(exit.ExitCode, exit.Signal)
	return nil
}

// agentEvent is the part of the harness's events (coder.Event) that the CLI shows.
type agentEvent struct {
	Type       string  `json:"type"`
	Turn       int     `json:"turn"`
	Text       string  `json:"text"`
	Tool       string  `json:"tool"`
	Args       string  `json:"args"`
	Output     string  `json:"output"`
	OK         *bool   `json:"ok"`
	Kind       string  `json:"kind"`
	Message    string  `json:"message"`
	RetryAfter float64 `json:"retry_after"`
	Checkpoint string  `json:"checkpoint"`
}

// renderEvents shows the harness's JSON lines as a person reads them. A line that is not
// an event is shown as it is.
func renderEvents(r io.Reader, w io.Writer) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	midLine := false
	newline := func() {
		if midLine {
			fmt.Fprintln(w)
			midLine = false
		}
	}
	for sc.Scan() {
		var e agentEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Type == "" {
			newline()
			fmt.Fprintln(w, sc.Text())
			continue
		}
		switch e.Type {
		case "turn":
			fmt.Fprintf(w, "turn %d: %s\n", e.Turn, errdefs.Clip(e.Text, 200))
		case "text":
			fmt.Fprint(w, e.Text)
			midLine = !strings.HasSuffix(e.Text, "\n")
		case "tool_call":
			newline()
			fmt.Fprintf(w, "> %s %s\n", e.Tool, errdefs.Clip(e.Args, 200))
		case "tool_result":
			status := "ok"
			if e.OK != nil && !*e.OK {
				status = "failed"
			}
			fmt.Fprintf(w, "  %s: %s\n", status, firstLines(e.Output, 6))
		case "wait":
			newline()
			fmt.Fprintf(w, "waiting %.0fs: %s\n", e.RetryAfter, e.Message)
		case "checkpoint":
			newline()
			fmt.Fprintf(w, "checkpoint %s (paddock undo takes the turn back)\n", e.Checkpoint)
		case "error":
			newline()
			fmt.Fprintf(w, "stopped (%s): %s\n", e.Kind, e.Message)
		case "recovered":
			newline()
			fmt.Fprintf(w, "note: %s\n", e.Message)
		case "answer", "done":
			newline()
		}
	}
	newline()
	return sc.Err()
}

// firstLines is the first n lines of s, indented, saying how many more there were.
func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	more := len(lines) - n
	if more > 0 {
		lines = lines[:n]
	}
	out := strings.Join(lines, "\n    ")
	if more > 0 {
		out += fmt.Sprintf("\n    [%d more lines]", more)
	}
	return out
}
